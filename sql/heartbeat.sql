-- Extend the lease of every job this worker is running, in one statement.
-- Rows locked right now are skipped, not waited for: their outcome is being written
-- (the completer, or a claim that carries `done`s), and that write locks the same
-- rows in another order, so waiting could deadlock with it (PostgreSQL then kills one
-- side after deadlock_timeout, 1 s). If the write fails, the next beat extends them.
UPDATE {{schema}}.jobs j
SET heartbeat_at = now()
FROM (
    SELECT id
    FROM {{schema}}.jobs
    WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2
    FOR UPDATE SKIP LOCKED
) AS mine
WHERE j.id = mine.id;
