-- A starting worker's one statement, once its LISTEN connection is up (startup.py): the
-- schema's version and, only when that is $9 (this aiopgq's), the record of its tasks
-- ($8, tasks_upsert.sql), its row in the registry ($1-$7, as worker_register.sql) and
-- its queues' paused and limited sets (queue_sets_of.sql): one transaction where a
-- start made four. Committed without waiting for the WAL flush, as each of those is
-- alone. With any other version nothing is written: startup.py raises SchemaError.
WITH version AS (SELECT max(version) AS current FROM {{schema}}.schema_version),
unflushed AS (
    SELECT set_config('synchronous_commit', 'off', true) FROM version WHERE current = $9
),
args AS (
    SELECT {{> workers/registry_args.sql}},
           $8::text::jsonb AS tasks
    FROM unflushed
),
recorded AS ({{> workers/tasks_upsert.sql}}),
registered AS ({{> workers/registry_upsert.sql}}),
sets AS ({{> claim/queue_sets_of.sql}})
SELECT v.current, s.paused, s.limited FROM version v, sets s;
