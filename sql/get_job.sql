SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts, run_at,
       locked_at, locked_by, heartbeat_at, last_error, result::text, created_at, finished_at,
       (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
       metadata::text
FROM {{schema}}.jobs j
WHERE id = $1;
