-- The newest jobs of status $1, queue $2 and task $3 (NULL: any) with an id below $5
-- (NULL: any; the next page), at most $4, in the columns of get_job.sql, from jobs and
-- jobs_archive (the partitioned layout's finished jobs). For operators (`aiopgq jobs`,
-- the dashboard): each table is read in id order, newest first, and merged up to the
-- limit.
SELECT * FROM (
    (SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts,
            run_at, locked_at, locked_by, heartbeat_at, last_error, result::text, created_at,
            finished_at, errors::text,
            (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
            metadata::text
     FROM {{schema}}.jobs j
     WHERE ($1::text IS NULL OR status = $1::text::{{schema}}.job_status)
       AND ($2::text IS NULL OR queue = $2::text) AND ($3::text IS NULL OR task = $3::text)
       AND ($5::bigint IS NULL OR id < $5::bigint)
     ORDER BY id DESC
     LIMIT $4)
    UNION ALL
    (SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts,
            run_at, locked_at, locked_by, heartbeat_at, last_error, result::text, created_at,
            finished_at, errors::text, NULL::timestamptz AS tick, metadata::text
     FROM {{schema}}.jobs_archive
     WHERE ($1::text IS NULL OR status = $1::text::{{schema}}.job_status)
       AND ($2::text IS NULL OR queue = $2::text) AND ($3::text IS NULL OR task = $3::text)
       AND ($5::bigint IS NULL OR id < $5::bigint)
     ORDER BY id DESC
     LIMIT $4)
) AS both_tables
ORDER BY id DESC
LIMIT $4;
