-- Extend the lease of every job this worker is running, in one statement.
UPDATE {{schema}}.jobs
SET heartbeat_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2;
