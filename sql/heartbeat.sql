-- Extend the lease of every job this worker is running, in one statement. The jobs
-- whose lease it extended come back: only those are known to be still ours (the
-- fence, aiopgq/_worker/leases.py).
UPDATE {{schema}}.jobs
SET heartbeat_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2
RETURNING id;
