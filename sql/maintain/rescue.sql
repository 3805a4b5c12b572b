-- Jobs whose lease expired (no heartbeat for $1 seconds: their worker died) go
-- back to pending, or to failed when the lost attempt was their last one. The
-- attempt was counted at dequeue, so a job that kills its worker cannot loop.
-- A job that ends failed and that someone awaits is announced (complete_error.sql); one
-- that others depend on settles its children (sql/functions/dependencies.sql).
WITH expired AS (
    SELECT id, format('lease expired: worker %s sent no heartbeat for %s s (attempt %s of %s)',
                      locked_by, $1::float8, attempts, max_attempts) AS error
    FROM {{schema}}.jobs
    WHERE status = 'running' AND heartbeat_at < now() - make_interval(secs => $1)
    ORDER BY heartbeat_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), rescued AS (
UPDATE {{schema}}.jobs j
SET status = CASE WHEN j.attempts >= j.max_attempts
                  THEN 'failed'::{{schema}}.job_status
                  ELSE 'pending'::{{schema}}.job_status END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at ELSE now() END,
    last_error = expired.error,
    errors = {{schema}}.push_error(j.errors, jsonb_build_object(
        'at', extract(epoch FROM now()), 'attempt', j.attempts, 'worker', j.locked_by,
        'error', expired.error)),
    locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.queue, j.task, j.status::text AS status, j.last_error,
    CASE WHEN j.metadata ? 'waited' AND j.status = 'failed'
         THEN pg_notify({{done_channel}}, j.id::text) END AS notified,
    CASE WHEN j.metadata ? 'dependents' AND j.status = 'failed' THEN j.id END AS parent
), settled AS (
    SELECT {{schema}}.settle_dependents(array_agg(parent), array_agg('failed'::text), NULL)
    FROM rescued WHERE parent IS NOT NULL
)
SELECT r.id, r.queue, r.task, r.status, r.last_error, r.notified FROM rescued r, settled;
