-- Counts per queue and status, and the age of the oldest runnable pending job.
SELECT queue, status::text, count(*) AS jobs,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_runnable_age
FROM {{schema}}.jobs
GROUP BY queue, status
ORDER BY queue, status;
