-- The $1 jobs that failed last, newest first, in the columns of get_job.sql: for live
-- views (the dashboard polls it). In jobs, read backwards through the index of
-- finished jobs by (status, finished_at) -- the literals prove its predicate -- so it
-- stops after $1 rows whatever the number of done jobs; in the archive (the
-- partitioned layout), through the failed partitions' id index.
SELECT * FROM (
    (SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts,
            run_at, locked_at, locked_by, heartbeat_at, last_error, result::text, created_at,
            finished_at, errors::text,
            (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
            metadata::text
     FROM {{schema}}.jobs j
     WHERE status = 'failed' AND status IN ('done', 'failed', 'cancelled')
     ORDER BY finished_at DESC
     LIMIT $1)
    UNION ALL
    (SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts,
            run_at, locked_at, locked_by, heartbeat_at, last_error, result::text, created_at,
            finished_at, errors::text, NULL::timestamptz AS tick, metadata::text
     FROM {{schema}}.jobs_archive
     WHERE status = 'failed'
     ORDER BY id DESC
     LIMIT $1)
) AS both_tables
ORDER BY finished_at DESC
LIMIT $1;
