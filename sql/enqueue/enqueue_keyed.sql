-- One job with an idempotency key through the SQL contract (SyncQueue): the id of the
-- new job, or of the job holding the key. $1 task, $2 payload (JSON text), $3 queue,
-- $4 priority, $5 run_at (NULL: now), $6 max_attempts, $7 key: insert_job.sql's order.
SELECT {{schema}}.enqueue($1, $2::text::jsonb, $3, coalesce($5, now()), $4, $6, $7);
