-- Extend the lease of every job this worker is running, in one statement, and
-- return the ones among them that were cancelled (cancel.sql): the worker stops
-- their handlers. The NOTIFY that cancel.sql sends is faster; this is the fallback
-- when the LISTEN connection missed it, at no extra round trip.
WITH beat AS (
    UPDATE {{schema}}.jobs
    SET heartbeat_at = now()
    WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2
)
SELECT coalesce(array_agg(id), '{}')
FROM {{schema}}.jobs
WHERE id = ANY($1::bigint[]) AND status = 'cancelled';
