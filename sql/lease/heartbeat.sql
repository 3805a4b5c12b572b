-- Extend the lease of every job this worker is running ($1 ids, $2 worker id), in one
-- statement. Returns one row: `renewed`, the jobs whose lease it extended; `lost`,
-- those the database no longer has running on this worker (rescued, cancelled, changed
-- by hand), whose handlers the worker stops at once (the fence, aiopgq/_worker/leases.py);
-- and `cancelled`, those among them that were cancelled (cancel.sql): they end
-- `cancelled` rather than with a lost lease. The NOTIFY that cancel.sql sends is
-- faster; this is the fallback when the LISTEN connection missed it, at no extra
-- round trip. The last two are read in the statement's snapshot, before the UPDATE.
-- Rows locked right now are skipped, not waited for: their outcome is being written
-- (the completer, or a claim that carries `done`s), and that write locks the same
-- rows in another order, so waiting could deadlock with it (PostgreSQL then kills one
-- side after deadlock_timeout, 1 s). A skipped row is neither renewed nor lost: its
-- lease counts from where it did (leases.py), and the next beat extends it if the
-- write failed.
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
    RETURNING j.id
)
SELECT ARRAY(SELECT id FROM beat) AS renewed,
       coalesce(array_agg(h.id) FILTER (
           WHERE j.id IS NULL OR j.status <> 'running' OR j.locked_by IS DISTINCT FROM $2),
           '{}') AS lost,
       coalesce(array_agg(h.id) FILTER (WHERE j.status = 'cancelled'), '{}') AS cancelled
FROM unnest($1::bigint[]) AS h(id)
LEFT JOIN {{schema}}.jobs j ON j.id = h.id;
