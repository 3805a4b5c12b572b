-- insert_job.sql with the enqueuing span's trace context ($8, JSON text), used only
-- by producers that trace (aiopgq.tracing). Keep the two alike (tests/observe
-- compares them).
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts, idempotency_key, trace_context)
VALUES ($1, $2::text::jsonb, $3, $4, coalesce($5, now()), $6, $7, $8::text::jsonb)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running')
DO NOTHING
RETURNING id, run_at, created_at;
