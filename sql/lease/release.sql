-- Give jobs back without counting the attempt: the worker stopped before they
-- finished (graceful shutdown deadline), the job itself did nothing wrong.
-- Wake the other workers of those queues: nobody else knows these jobs are back.
-- $1 ids, $2 attempts (lease tokens), $3 worker id, $4 the NOTIFY channel (schema).
WITH released AS (
    UPDATE {{schema}}.jobs j
    SET status = 'pending', attempts = j.attempts - 1,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
    FROM unnest($1::bigint[], $2::int[]) AS o(id, attempt)
    WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $3
    RETURNING j.queue
)
SELECT count(pg_notify($4, q.queue)) FROM (SELECT DISTINCT queue FROM released) AS q;
