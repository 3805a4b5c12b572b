-- Jobs waiting or running per queue, and how long the oldest runnable one has
-- waited. Read through the two partial indexes only (pending rows; rows with a
-- lease, which are the running ones: migration 0007), never the finished rows.
SELECT queue,
       count(*) FILTER (WHERE status = 'pending' AND run_at <= now()) AS pending,
       count(*) FILTER (WHERE status = 'pending' AND run_at > now()) AS scheduled,
       count(*) FILTER (WHERE status = 'running') AS running,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_runnable_age
FROM (
    SELECT queue, status, run_at FROM {{schema}}.jobs WHERE status = 'pending'
    UNION ALL
    SELECT queue, status, run_at FROM {{schema}}.jobs WHERE heartbeat_at IS NOT NULL
) AS live
GROUP BY queue
ORDER BY queue;
