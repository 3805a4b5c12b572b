-- The record of a worker's tasks (included by register_tasks.sql and worker_start.sql,
-- never run alone), from the `args` row of the statement that includes it: `worker_id`,
-- and `tasks`, a JSON array of {name, queue, priority, max_attempts, arguments, required,
-- any_keyword} sorted by name, so that workers starting together lock the rows in the
-- same order. The last worker to start wins.
INSERT INTO {{schema}}.tasks AS t
    (name, queue, priority, max_attempts, arguments, required, any_keyword, registered_by)
SELECT d.name, d.queue, d.priority, d.max_attempts, d.arguments, d.required, d.any_keyword,
       a.worker_id
FROM args a, jsonb_to_recordset(a.tasks) AS d(name text, queue text, priority integer,
    max_attempts integer, arguments text[], required text[], any_keyword boolean)
ORDER BY d.name
ON CONFLICT (name) DO UPDATE
SET queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts,
    arguments = excluded.arguments, required = excluded.required,
    any_keyword = excluded.any_keyword, registered_by = excluded.registered_by,
    registered_at = now()
