-- Sessions touching the jobs table that wait on a lock, with who blocks them.
SELECT a.pid, a.application_name, a.state, a.wait_event_type, a.wait_event,
       extract(epoch FROM now() - a.xact_start)::float8 AS xact_age,
       pg_blocking_pids(a.pid) AS blocked_by, left(a.query, 200) AS query
FROM pg_stat_activity a
WHERE a.datname = current_database()
  AND cardinality(pg_blocking_pids(a.pid)) > 0
ORDER BY a.xact_start;
