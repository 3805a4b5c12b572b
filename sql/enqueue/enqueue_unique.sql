-- Enqueue jobs of task $1 with idempotency keys (see sql/functions/enqueue_unique.sql):
-- $2 the payloads as one JSON array, $3 one key (or NULL) per payload, $4 queue,
-- $5 priority, $6 run_at (NULL: now), $7 max_attempts, $8 unique_for, $9 on_conflict.
-- One row per payload, in any order (`ord` is its 1-based position).
SELECT ord, outcome, id, job_queue AS queue, job_task AS task, payload, status,
       job_priority AS priority, attempts, job_max_attempts AS max_attempts,
       job_run_at AS run_at, locked_by, heartbeat_at, last_error, result, created_at,
       finished_at, tick
FROM {{schema}}.enqueue_unique($1, $2::text::jsonb, $3::text[], $4, $5, $6, $7, $8, $9);
