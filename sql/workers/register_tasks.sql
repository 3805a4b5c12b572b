-- A worker records the tasks it serves, at start (one statement, never on the hot
-- path). $1 is a JSON array of {name, queue, priority, max_attempts, arguments,
-- required, any_keyword}, sorted by name so that workers starting together lock
-- the rows in the same order; $2 the worker id. The last worker to start wins.
-- Its commit does not wait for the WAL flush (`unflushed`: synchronous_commit off for
-- this transaction): the worker's first claim waits for this statement, and a crash
-- that loses the rows loses the worker too, which writes them again when it restarts.
WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO {{schema}}.tasks AS t
    (name, queue, priority, max_attempts, arguments, required, any_keyword, registered_by)
SELECT d.name, d.queue, d.priority, d.max_attempts, d.arguments, d.required, d.any_keyword, $2
FROM unflushed, jsonb_to_recordset($1::text::jsonb) AS d(name text, queue text,
    priority integer, max_attempts integer, arguments text[], required text[],
    any_keyword boolean)
ORDER BY d.name
ON CONFLICT (name) DO UPDATE
SET queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts,
    arguments = excluded.arguments, required = excluded.required,
    any_keyword = excluded.any_keyword, registered_by = excluded.registered_by,
    registered_at = now();
