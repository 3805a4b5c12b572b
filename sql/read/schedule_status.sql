-- Every schedule, with its newest tick that has a job (periodic_ticks, read backwards).
SELECT s.name, s.cron, s.timezone, s.missed, s.queue, s.since, s.last_tick, s.last_worker,
       s.registered_at, t.job_id AS last_job_id, t.tick AS last_run,
       j.status::text AS last_status
FROM {{schema}}.schedules s
LEFT JOIN LATERAL (
    SELECT tick, job_id FROM {{schema}}.periodic_ticks
    WHERE name = s.name
    ORDER BY tick DESC
    LIMIT 1
) t ON true
LEFT JOIN {{schema}}.jobs j ON j.id = t.job_id
ORDER BY s.name;
