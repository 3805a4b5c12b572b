-- Extend the lease of every job this worker is running, in one statement, and
-- return the ones among them that were cancelled (cancel.sql): the worker stops
-- their handlers. The NOTIFY that cancel.sql sends is faster; this is the fallback
-- when the LISTEN connection missed it, at no extra round trip.
-- Rows locked right now are skipped, not waited for: their outcome is being written
-- (the completer, or a claim that carries `done`s), and that write locks the same
-- rows in another order, so waiting could deadlock with it (PostgreSQL then kills one
-- side after deadlock_timeout, 1 s). If the write fails, the next beat extends them.
WITH mine AS (
    SELECT id
    FROM {{schema}}.jobs
    WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2
    FOR UPDATE SKIP LOCKED
), beat AS (
    UPDATE {{schema}}.jobs j
    SET heartbeat_at = now()
    FROM mine
    WHERE j.id = mine.id
)
SELECT coalesce(array_agg(id), '{}')
FROM {{schema}}.jobs
WHERE id = ANY($1::bigint[]) AND status = 'cancelled';
