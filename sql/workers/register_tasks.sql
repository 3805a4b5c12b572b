-- A worker records the tasks it serves ($1, the JSON array tasks_upsert.sql reads; $2
-- the worker id): at start, when worker_start.sql could not (one statement, never on
-- the hot path).
-- Its commit does not wait for the WAL flush (`unflushed`: synchronous_commit off for
-- this transaction): the worker's first claim waits for this statement, and a crash
-- that loses the rows loses the worker too, which writes them again when it restarts.
WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true)),
args AS (SELECT $2::text AS worker_id, $1::text::jsonb AS tasks FROM unflushed)
{{> workers/tasks_upsert.sql}};
