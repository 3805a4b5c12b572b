SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts, run_at,
       locked_at, locked_by, heartbeat_at, last_error, result::text, created_at, finished_at,
       metadata::text
FROM {{schema}}.jobs
WHERE id = $1;
