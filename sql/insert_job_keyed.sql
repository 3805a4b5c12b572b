-- insert_job.sql for a job with a concurrency key ($8); a separate statement so
-- that enqueues without a key bind and send nothing more.
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts, idempotency_key,
                             concurrency_key)
VALUES ($1, $2::text::jsonb, $3, $4, coalesce($5, now()), $6, $7, $8)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running')
DO NOTHING
RETURNING id, run_at, created_at;
