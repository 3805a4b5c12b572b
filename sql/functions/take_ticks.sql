-- Take the ticks of schedule `name` from `expected` (the last tick the caller read) up to
-- `latest`, and enqueue `ticks` (with their payloads) in the same statement; returns
-- whether it took them and the new jobs' ids. A tick's job has run_at = the tick, and
-- a row in periodic_ticks. `last_tick` only moves forward, by this compare-and-set: under
-- READ COMMITTED a concurrent caller with the same `expected` waits for the row lock,
-- then finds last_tick moved and takes nothing, so of the workers that find the same
-- ticks due, one enqueues them (aiopgq/_worker/scheduler.py).
-- SECURITY DEFINER: a worker role may enqueue periodic ticks, and nothing else (it has
-- no INSERT on jobs); its search_path ends in pg_temp (sql/README.md: definer
-- functions).
CREATE OR REPLACE FUNCTION {{schema}}.take_ticks(name text, expected timestamp with time zone, latest timestamp with time zone, worker text, queue text, priority integer, max_attempts integer, ticks timestamp with time zone[], payloads text[])
 RETURNS TABLE(taken boolean, ids bigint[])
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH advanced AS (
        UPDATE {{schema}}.schedules s
        SET last_tick = take_ticks.latest, last_worker = take_ticks.worker
        WHERE s.name = take_ticks.name AND s.last_tick IS NOT DISTINCT FROM take_ticks.expected
        RETURNING s.name
    ), inserted AS (
        INSERT INTO {{schema}}.jobs (task, payload, queue, priority, max_attempts, run_at,
                                     enqueued_by)
        SELECT a.name, t.payload::jsonb, take_ticks.queue, take_ticks.priority,
               take_ticks.max_attempts, t.tick, session_user
        FROM advanced a, unnest(take_ticks.ticks, take_ticks.payloads) AS t(tick, payload)
        RETURNING id, task, run_at
    ), ticked AS (
        INSERT INTO {{schema}}.periodic_ticks (name, tick, job_id)
        SELECT i.task, i.run_at, i.id FROM inserted i
    )
    SELECT EXISTS (SELECT FROM advanced),
           coalesce((SELECT array_agg(i.id ORDER BY i.run_at) FROM inserted i), '{}');
$function$;

REVOKE ALL ON FUNCTION {{schema}}.take_ticks(name text, expected timestamp with time zone, latest timestamp with time zone, worker text, queue text, priority integer, max_attempts integer, ticks timestamp with time zone[], payloads text[]) FROM PUBLIC;
