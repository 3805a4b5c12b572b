-- Delete up to $2 kept emissions older than $1 seconds (the events' retention,
-- sql/functions/events.sql), oldest first; returns how many.
WITH gone AS (
    DELETE FROM {{schema}}.events
    WHERE name IN (
        SELECT name FROM {{schema}}.events
        WHERE emitted_at < now() - make_interval(secs => $1::float8)
        ORDER BY emitted_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
)
SELECT count(*) FROM gone;
