-- Running jobs whose lease (heartbeat_at) is older than $1 seconds, per worker that
-- holds them, with whether that worker is still in the registry and when it was
-- last seen. Read through jobs_running_idx.
SELECT j.locked_by, count(*) AS jobs, min(j.id) AS first_job,
       extract(epoch FROM now() - min(j.heartbeat_at))::float8 AS oldest_age,
       w.id IS NOT NULL AS registered,
       extract(epoch FROM now() - w.last_seen)::float8 AS last_seen_age
FROM {{schema}}.jobs j
LEFT JOIN {{schema}}.workers w ON w.id = j.locked_by
WHERE j.heartbeat_at < now() - make_interval(secs => $1)
GROUP BY j.locked_by, w.id, w.last_seen
ORDER BY oldest_age DESC;
