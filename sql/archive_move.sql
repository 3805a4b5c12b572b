-- Move up to $3 jobs of status $1 ('done', 'failed' or 'cancelled') that finished more
-- than $2 seconds ago from jobs into jobs_archive, oldest first, in one statement: a
-- reader sees each job in exactly one of the two. Rows that finished before $4 (the
-- start of the status's oldest partition: older ones were dropped, so these rows are
-- past their retention and the pruner deletes them) stay. SKIP LOCKED: a row an
-- operator is retrying waits for the next pass. The IN list proves the partial index's
-- predicate for a generic plan too (as in prune.sql).
WITH moved AS (
    DELETE FROM {{schema}}.jobs
    WHERE id IN (
        SELECT id
        FROM {{schema}}.jobs
        WHERE status = $1::text::{{schema}}.job_status
          AND status IN ('done', 'failed', 'cancelled')
          AND finished_at < now() - make_interval(secs => $2)
          AND finished_at >= $4::timestamptz
        ORDER BY finished_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    )
    RETURNING *
)
INSERT INTO {{schema}}.jobs_archive
SELECT * FROM moved;
