-- Enqueue one job without an idempotency key (keyed jobs go through enqueue_unique.sql).
-- Payload arrives as JSON text so that a caller's own jsonb codec on a shared pool
-- cannot change its meaning.
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts)
VALUES ($1, $2::text::jsonb, $3, $4, coalesce($5, now()), $6)
RETURNING id, run_at, created_at;
