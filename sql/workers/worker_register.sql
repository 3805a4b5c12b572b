-- A worker records itself in the registry ($1 id, $2 host, $3 pid, $4 queues,
-- $5 concurrency, $6 version, $7 heartbeat interval in seconds): at start, and on
-- every heartbeat to say it is alive. An upsert, so a row that the maintenance
-- leader expired while this worker could not reach the database comes back.
-- Committed without waiting for the WAL flush (as register_tasks.sql): the first claim
-- waits for the first of these, and a row a crash loses is written by the next beat.
WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO {{schema}}.workers AS w
    (id, host, pid, queues, concurrency, version, heartbeat_interval)
SELECT $1, $2, $3, $4, $5, $6, $7 FROM unflushed
ON CONFLICT (id) DO UPDATE SET last_seen = now();
