-- Every schedule, with the newest tick that has a job (jobs_tick_idx, read backwards).
SELECT s.name, s.cron, s.timezone, s.missed, s.queue, s.since, s.last_tick, s.last_worker,
       s.registered_at, j.id AS last_job_id, j.tick AS last_run, j.status::text AS last_status
FROM {{schema}}.schedules s
LEFT JOIN LATERAL (
    SELECT id, tick, status FROM {{schema}}.jobs
    WHERE task = s.name AND tick IS NOT NULL
    ORDER BY tick DESC
    LIMIT 1
) j ON true
ORDER BY s.name;
