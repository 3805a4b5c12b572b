-- Wait for an event as the step at $4 (ctx.wait_event): sql/functions/steps.sql.
-- $1 job, $2 attempt, $3 worker, $5 event name, $6 started (epoch seconds), $7 the
-- timeout in seconds from now, by the database clock (NULL: none).
SELECT outcome, payload
FROM {{schema}}.wait_event($1, $2, $3, $4, $5, to_timestamp($6::float8),
    now() + make_interval(secs => $7::float8));
