-- Sessions of this database waiting on a lock for longer than $1 seconds (since
-- their statement started), each with the sessions that block it.
SELECT w.pid, w.application_name, w.usename::text AS usename, w.wait_event_type,
       w.wait_event, extract(epoch FROM now() - w.query_start)::float8 AS waiting,
       left(w.query, 200) AS query,
       b.pid AS blocker_pid, b.application_name AS blocker_application,
       b.usename::text AS blocker_user, b.state AS blocker_state,
       extract(epoch FROM now() - b.xact_start)::float8 AS blocker_xact_age,
       left(b.query, 200) AS blocker_query
FROM pg_stat_activity w
CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocking(pid)
LEFT JOIN pg_stat_activity b ON b.pid = blocking.pid
WHERE w.datname = current_database() AND w.wait_event_type = 'Lock'
  AND w.query_start < now() - make_interval(secs => $1)
ORDER BY w.query_start, w.pid, b.pid;
