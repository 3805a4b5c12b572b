-- A worker's row in the registry (included by worker_register.sql and worker_start.sql,
-- never run alone), from the `args` row of the statement that includes it. An upsert,
-- so a row that the maintenance leader expired while this worker could not reach the
-- database comes back.
INSERT INTO {{schema}}.workers AS w
    (id, host, pid, queues, concurrency, version, heartbeat_interval)
SELECT a.worker_id, a.host, a.pid, a.queues, a.concurrency, a.version, a.heartbeat_interval
FROM args a
ON CONFLICT (id) DO UPDATE SET last_seen = now()
