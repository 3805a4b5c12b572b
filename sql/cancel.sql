-- Cancel a job that has not started. One row when the job exists: cancelled is true if
-- this call cancelled it (with its task and queue, for observers), false if it is
-- running or finished (left alone); no row when no job has that id. Both parts see one
-- snapshot; the UPDATE waits for a claim that holds the row and then re-checks its
-- status, so a job claimed meanwhile is left alone. A job someone awaits is announced
-- on the done channel (complete_done.sql).
WITH cancelled AS (
    UPDATE {{schema}}.jobs
    SET status = 'cancelled', finished_at = now()
    WHERE id = $1 AND status = 'pending'
    RETURNING id, task, queue,
        CASE WHEN metadata ? 'waited' THEN pg_notify({{done_channel}}, id::text) END
)
SELECT c.id IS NOT NULL AS cancelled, c.task, c.queue
FROM {{schema}}.jobs j
LEFT JOIN cancelled c ON true
WHERE j.id = $1;
