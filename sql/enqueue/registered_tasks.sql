-- Every task a worker registered (sql/workers/register_tasks.sql): read by producers that
-- enqueue by name a task they did not register themselves, once per refresh.
SELECT name, queue, priority, max_attempts, arguments, required, any_keyword
FROM {{schema}}.tasks;
