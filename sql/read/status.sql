-- Counts per queue and status, and the age of the oldest runnable pending job, over
-- jobs and jobs_archive (the partitioned layout's finished jobs), and the mean
-- progress of the running jobs that report it (ctx.progress).
SELECT queue, status::text, count(*) AS jobs,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_runnable_age,
       avg(progress) FILTER (WHERE status = 'running') AS progress
FROM (
    SELECT queue, status, run_at,
           CASE WHEN status = 'running' THEN (metadata->>'progress')::float8 END AS progress
    FROM {{schema}}.jobs
    UNION ALL
    SELECT queue, status, run_at, NULL FROM {{schema}}.jobs_archive
) AS both_tables
GROUP BY queue, status
ORDER BY queue, status;
