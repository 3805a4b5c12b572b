-- A worker records itself in the registry ($1 id, $2 host, $3 pid, $4 queues,
-- $5 concurrency, $6 version, $7 heartbeat interval in seconds): on every heartbeat to
-- say it is alive, and at start when worker_start.sql could not.
-- Committed without waiting for the WAL flush (as register_tasks.sql): the first claim
-- waits for the first of these, and a row a crash loses is written by the next beat.
WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true)),
args AS (SELECT {{> workers/registry_args.sql}} FROM unflushed)
{{> workers/registry_upsert.sql}};
