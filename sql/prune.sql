-- Delete up to $2 finished jobs older than $1 seconds (oldest first), so the
-- pruner never holds long locks or writes a huge WAL burst.
DELETE FROM {{schema}}.jobs
WHERE id IN (
    SELECT id
    FROM {{schema}}.jobs
    WHERE status IN ('done', 'failed', 'cancelled')
      AND finished_at < now() - make_interval(secs => $1)
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
);
