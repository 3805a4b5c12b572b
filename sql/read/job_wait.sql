-- What a job waits for (`aiopgq job`, the dashboard): its status and run_at, and the
-- event and deadline (epoch seconds, NULL: none) of a job in ctx.wait_event. A sleeping
-- job has no job_waits row: it is pending or waiting (a timer: sleep_job.sql) at its
-- wake time, its last step a sleep.
SELECT j.status::text AS status, date_part('epoch', j.run_at) AS run_at, w.event,
       date_part('epoch', w.until) AS until
FROM {{schema}}.jobs j
LEFT JOIN {{schema}}.job_waits w ON w.job_id = j.id
WHERE j.id = $1;
