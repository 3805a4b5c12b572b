-- The next page of failed jobs after id $3, in id order, of queue $1 and task $2
-- (NULL: any), at most $4, in jobs and in jobs_archive (the partitioned layout's
-- finished jobs; Control.retry brings those back): retry_failed walks them with
-- retry_jobs.sql, one page per transaction, so that re-queueing a large backlog never
-- holds long locks.
SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids, max(id) AS last_id
FROM (
    SELECT id
    FROM (
        (SELECT id
         FROM {{schema}}.jobs
         WHERE status = 'failed' AND id > $3
           AND ($1::text IS NULL OR queue = $1::text) AND ($2::text IS NULL OR task = $2::text)
         ORDER BY id
         LIMIT $4)
        UNION ALL
        (SELECT id
         FROM {{schema}}.jobs_archive
         WHERE status = 'failed' AND id > $3
           AND ($1::text IS NULL OR queue = $1::text) AND ($2::text IS NULL OR task = $2::text)
         ORDER BY id
         LIMIT $4)
    ) AS both_tables
    ORDER BY id
    LIMIT $4
) AS page;
