-- insert_job.sql with the enqueuing span's trace context ($7, JSON text), used only
-- by producers that trace (aiopgq.tracing). Keep the two alike (tests/observe
-- compares them).
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts, trace_context)
VALUES ($1, $2::text::jsonb, $3, $4, coalesce($5, now()), $6, $7::text::jsonb)
RETURNING id, run_at, created_at;
