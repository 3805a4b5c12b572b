-- Cancel a job that has not started. One row when the job exists: true if this call
-- cancelled it, false if it is running or finished (left alone); no row when no job has
-- that id. Both CTEs see one snapshot; the UPDATE waits for a claim that holds the row
-- and then re-checks its status, so a job claimed meanwhile is left alone. A job
-- someone awaits is announced on the done channel (complete_done.sql).
WITH cancelled AS (
    UPDATE {{schema}}.jobs
    SET status = 'cancelled', finished_at = now()
    WHERE id = $1 AND status = 'pending'
    RETURNING id, CASE WHEN metadata ? 'waited' THEN pg_notify({{done_channel}}, id::text) END
)
SELECT EXISTS (SELECT FROM cancelled)
FROM {{schema}}.jobs
WHERE id = $1;
