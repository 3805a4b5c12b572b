-- Record failed attempts. A job with attempts left goes back to pending after
-- its backoff ($3 seconds); a job at max_attempts ends failed; $5 true fails it
-- at once, with no retry (it cannot run: unknown task, payload that does not fit
-- the task, result that is not JSON). $1 ids, $2 attempts (lease token), $4 errors,
-- $6 worker id. Each error also joins the job's history (push_error,
-- sql/functions/metadata.sql).
-- A job that ends failed and that someone awaits (`waited` in its metadata) is
-- announced on the done channel (the fourth column, always NULL). A job that ends
-- failed and that others depend on settles its children (sql/functions/dependencies.sql).
WITH ended AS (
UPDATE {{schema}}.jobs j
SET status = CASE
        WHEN o.final OR j.attempts >= j.max_attempts THEN 'failed'::{{schema}}.job_status
        ELSE 'pending'::{{schema}}.job_status END,
    run_at = CASE
        WHEN o.final OR j.attempts >= j.max_attempts THEN j.run_at
        ELSE now() + make_interval(secs => o.delay) END,
    finished_at = CASE WHEN o.final OR j.attempts >= j.max_attempts THEN now() END,
    last_error = o.error,
    errors = {{schema}}.push_error(j.errors, jsonb_build_object(
        'at', extract(epoch FROM now()), 'attempt', j.attempts, 'worker', $6::text,
        'error', o.error)),
    locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
FROM unnest($1::bigint[], $2::int[], $3::float8[], $4::text[], $5::bool[])
    AS o(id, attempt, delay, error, final)
WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $6
RETURNING j.id, j.status::text AS status, j.run_at,
    CASE WHEN j.metadata ? 'waited' AND j.status = 'failed'
         THEN pg_notify({{done_channel}}, j.id::text) END AS notified,
    CASE WHEN j.metadata ? 'dependents' AND j.status = 'failed' THEN j.id END AS parent
), settled AS (
    SELECT {{schema}}.settle_dependents(array_agg(parent), array_agg('failed'::text), NULL)
    FROM ended WHERE parent IS NOT NULL
)
SELECT e.id, e.status, e.run_at, e.notified FROM ended e, settled;
