-- Events (queue.emit_event, ctx.wait_event): an emission wakes the jobs that wait for its
-- name in the emitting transaction (no poller), and is kept so that a wait that comes
-- later returns it at once: the order of emit and wait does not matter.
--
-- Why no wake-up is lost: emit_event() and wait_event() (steps.sql) both take the same
-- transaction-level advisory lock on the event's name before they read anything, and
-- each of their later statements takes a new snapshot (VOLATILE PL/pgSQL). So of an emit
-- and a wait of one name, the second to take the lock sees the first one's commit: a
-- wait after the emit reads the kept emission (events) and records it; an emit after
-- the wait finds its job_waits row and makes the job pending. A wait can commit neither
-- before the emit's row is visible nor after the emit looked for waiters without being
-- seen.
--
-- Retention: one row per name, the last emission (emitting again replaces its payload);
-- the maintenance leader deletes emissions older than 30 days (prune_events.sql). A
-- name is meant for one occurrence of something ("payment:order-42"): a job that waits
-- for a name emitted earlier gets that emission.
--
-- SECURITY DEFINER: a producer (grant_producer) may emit but may neither read nor update
-- jobs; it wakes only jobs that wait for the name, and only to pending. Its search_path
-- ends in pg_temp (sql/README.md: definer functions); its DECLARE section names
-- pg_catalog's types (wake.sql says why).
CREATE OR REPLACE FUNCTION {{schema}}.emit_event(name text, payload jsonb DEFAULT NULL::jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    woken pg_catalog.int4 := 0;
    waiters record;
BEGIN
    IF emit_event.name IS NULL OR emit_event.name = '' THEN
        RAISE EXCEPTION 'emit_event: the event name must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('{{schema_name}}:event'), hashtext(emit_event.name));
    INSERT INTO {{schema}}.events AS e (name, payload, emitted_at)
    VALUES (emit_event.name, emit_event.payload, now())
    ON CONFLICT ON CONSTRAINT events_pkey
    DO UPDATE SET payload = EXCLUDED.payload, emitted_at = EXCLUDED.emitted_at;
    FOR waiters IN
        WITH woke AS (
            UPDATE {{schema}}.jobs j
            SET status = 'pending', run_at = now()
            FROM {{schema}}.job_waits w
            WHERE w.event = emit_event.name AND j.id = w.job_id
              AND j.status IN ('waiting', 'pending')
            RETURNING j.id, j.queue
        ), untimed AS (
            -- the timer of a far timeout (job_timers, sleep_job.sql): not needed now
            DELETE FROM {{schema}}.job_timers t USING woke WHERE t.job_id = woke.id
        )
        SELECT woke.queue, count(*) AS n FROM woke GROUP BY woke.queue
    LOOP
        PERFORM {{schema}}.wake_once(waiters.queue, now());
        woken := woken + waiters.n;
    END LOOP;
    RETURN woken;
END
$function$;
REVOKE ALL ON FUNCTION {{schema}}.emit_event(text, jsonb) FROM PUBLIC;
