-- Per queue: jobs waiting, scheduled and running (as sql/read/queue_depth.sql), and the
-- jobs that arrived and finished in the last $1 seconds. Read through the partial
-- indexes only: a job created in the window is still pending, is running, or
-- finished in the window, so no scan of the finished rows is needed for either rate.
WITH recent AS (
    SELECT now() - make_interval(secs => $1) AS since
)
SELECT queue,
       count(*) FILTER (WHERE status = 'pending' AND run_at <= now()) AS pending,
       count(*) FILTER (WHERE status = 'pending' AND run_at > now()) AS scheduled,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE created_at > (SELECT since FROM recent)) AS arrived,
       count(*) FILTER (WHERE finished_at > (SELECT since FROM recent)) AS finished,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_runnable_age
FROM (
    SELECT queue, status, run_at, created_at, NULL::timestamptz AS finished_at
    FROM {{schema}}.jobs WHERE status = 'pending'
    UNION ALL
    SELECT queue, status, run_at, created_at, NULL
    FROM {{schema}}.jobs WHERE heartbeat_at IS NOT NULL
    UNION ALL
    SELECT queue, status, run_at, created_at, finished_at
    FROM {{schema}}.jobs
    WHERE status IN ('done', 'failed', 'cancelled') AND finished_at > (SELECT since FROM recent)
) AS live
GROUP BY queue
ORDER BY queue;
