-- Delete up to $3 jobs of status $1 ('done', 'failed' or 'cancelled') that finished
-- more than $2 seconds ago, oldest first, so the pruner never holds long locks or
-- writes a huge WAL burst. The IN list proves the partial index's predicate for a
-- generic plan too (status = $1 alone cannot); the index leads with the status.
DELETE FROM {{schema}}.jobs
WHERE id IN (
    SELECT id
    FROM {{schema}}.jobs
    WHERE status = $1::text::{{schema}}.job_status
      AND status IN ('done', 'failed', 'cancelled')
      AND finished_at < now() - make_interval(secs => $2)
    ORDER BY finished_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
);
