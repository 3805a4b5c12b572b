-- Jobs claimed by worker $1 that it never received (the connection died after the
-- dequeue committed but before its result arrived) go back at once, instead of
-- waiting for their lease to expire. $2 lists the jobs the worker does hold.
UPDATE {{schema}}.jobs
SET status = 'pending', attempts = attempts - 1,
    locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
WHERE status = 'running' AND locked_by = $1 AND NOT (id = ANY($2::bigint[]))
    AND heartbeat_at IS NOT NULL  -- every claimed row has one: reads jobs_running_idx
RETURNING id;
