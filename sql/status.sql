-- Counts per queue and status, the age of the oldest runnable pending job, and the
-- mean progress of the running jobs that report it (ctx.progress).
SELECT queue, status::text, count(*) AS jobs,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_runnable_age,
       avg((metadata->>'progress')::float8) FILTER (WHERE status = 'running') AS progress
FROM {{schema}}.jobs
GROUP BY queue, status
ORDER BY queue, status;
