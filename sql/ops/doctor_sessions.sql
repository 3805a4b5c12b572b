-- Sessions of this database whose transaction is older than $1 seconds: active
-- (a long query) or idle in transaction. The horizon each holds back (its snapshot's
-- xmin, else its own transaction id) keeps vacuum from removing any row version
-- deleted after it, in every table: jobs bloats meanwhile.
SELECT pid, usename::text AS usename, application_name, client_addr::text AS client_addr,
       state, coalesce(backend_xmin, backend_xid)::text AS xmin,
       age(coalesce(backend_xmin, backend_xid)) AS xmin_age,
       extract(epoch FROM now() - xact_start)::float8 AS xact_age,
       extract(epoch FROM now() - state_change)::float8 AS state_age,
       left(query, 200) AS query
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'
  AND xact_start < now() - make_interval(secs => $1)
ORDER BY xact_start;
