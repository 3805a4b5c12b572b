-- Give jobs back without counting the attempt: the worker stopped before they
-- finished (graceful shutdown deadline), the job itself did nothing wrong.
UPDATE {{schema}}.jobs j
SET status = 'pending', attempts = j.attempts - 1,
    locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
FROM unnest($1::bigint[], $2::int[]) AS o(id, attempt)
WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $3;
