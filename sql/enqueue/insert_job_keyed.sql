-- insert_job.sql for a job with a concurrency key ($7), and the enqueuing span's trace
-- context ($8, JSON text, or NULL): a statement of its own, so that enqueues without a
-- key bind and send nothing more.
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts,
                             concurrency_key, trace_context)
VALUES ($1, $2::text::jsonb, $3, $4, coalesce($5, now()), $6, $7, $8::text::jsonb)
RETURNING id, run_at, created_at;
