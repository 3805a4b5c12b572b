-- Extend the lease of every job this worker is running ($1 ids, $2 worker id), in one
-- statement. Returns one row: `renewed`, the jobs whose lease it extended; `lost`,
-- those the database no longer has running on this worker (rescued, cancelled, changed
-- by hand), whose handlers the worker stops at once (the fence, aiopgq/_worker/leases.py);
-- and `cancelled`, those among them that were cancelled (cancel.sql): they end
-- `cancelled` rather than with a lost lease. The NOTIFY that cancel.sql sends is
-- faster; this is the fallback when the LISTEN connection missed it, at no extra
-- round trip. The last two are read in the statement's snapshot, before the UPDATE.
WITH beat AS (
    UPDATE {{schema}}.jobs
    SET heartbeat_at = now()
    WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2
    RETURNING id
)
SELECT ARRAY(SELECT id FROM beat) AS renewed,
       coalesce(array_agg(h.id) FILTER (
           WHERE j.id IS NULL OR j.status <> 'running' OR j.locked_by IS DISTINCT FROM $2),
           '{}') AS lost,
       coalesce(array_agg(h.id) FILTER (WHERE j.status = 'cancelled'), '{}') AS cancelled
FROM unnest($1::bigint[]) AS h(id)
LEFT JOIN {{schema}}.jobs j ON j.id = h.id;
