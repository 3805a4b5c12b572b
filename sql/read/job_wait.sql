-- What a suspended job waits for (`aiopgq job`, the dashboard): the event and its
-- deadline (epoch seconds, NULL: none) of a job in ctx.wait_event. No row: it waits for
-- no event (a sleeping job's wake time is its run_at and its last sleep step).
SELECT event, date_part('epoch', until) AS until, date_part('epoch', since) AS since
FROM {{schema}}.job_waits
WHERE job_id = $1;
