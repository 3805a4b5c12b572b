-- The workers registry, with how many jobs each holds now (rows with a lease:
-- jobs_running_idx) and how long ago each was last seen.
SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.version, w.heartbeat_interval,
       w.started_at, w.last_seen,
       extract(epoch FROM now() - w.last_seen)::float8 AS last_seen_age,
       extract(epoch FROM now() - w.started_at)::float8 AS uptime,
       coalesce(held.running, 0) AS running
FROM {{schema}}.workers w
LEFT JOIN (
    SELECT locked_by, count(*) AS running
    FROM {{schema}}.jobs
    WHERE heartbeat_at IS NOT NULL
    GROUP BY locked_by
) AS held ON held.locked_by = w.id
ORDER BY w.started_at, w.id;
