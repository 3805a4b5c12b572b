-- Enqueue one job. Payload arrives as JSON text so that a caller's own jsonb
-- codec on a shared pool cannot change its meaning. With an idempotency key
-- ($7) a live job with the same key is returned instead of a duplicate.
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts, idempotency_key)
VALUES ($1, $2::text::jsonb, $3, $4, coalesce($5, now()), $6, $7)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running')
DO NOTHING
RETURNING id, run_at, created_at;
