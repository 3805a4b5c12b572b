-- Durable steps: the waits of ctx.wait_event (aiopgq/_steps.py holds the rest of the
-- design; the tables are in migrations/0027_durable_steps.sql).
--
-- A step's row (job_steps) is written only by the run that holds the job's lease (the
-- statements check id, attempt, worker and status 'running', as every outcome does), by
-- one INSERT: record_step.sql, in the transaction of the step's database work when it
-- ran through ctx.transaction(), so the work and the record commit together or not at
-- all. Two runs of one job (a fenced run that lost its lease and the run that took it)
-- meet on the primary key (job_id, position) and on (job_id, name): the second INSERT
-- waits for the first one's commit, then does nothing, and its run rolls its own
-- transaction back and replays the recorded value. So what a step's transaction covers
-- happens once; an outside effect happens again only when a run died (or lost its
-- lease) between the effect and the record: the step in flight.
--
-- wait_event(): one call either returns the event (kept or emitted since) and records it
-- as the step at `position`, records a timeout whose time has come, or suspends the job:
-- its lease ends (attempt not counted: a wait is not a failure), and it waits in status
-- 'waiting' (off the claim's index: a waiting job costs the claim nothing), with a timer
-- (job_timers, as a sleep: sleep_job.sql) when it has a timeout more than 60 seconds
-- ahead, or pending at a nearer deadline. A job with an idempotency key waits pending, at run_at
-- 'infinity' without a timeout: the key's holder must be pending or running
-- (jobs_idempotency_key_idx, enqueue_unique()), so the key keeps deduplicating while the
-- job waits; such a waiter costs the claim's index walk what a sleeping job costs
-- (docs/durable-steps.md has the figures). The deadline of the first wait at a position is
-- kept (job_waits.until), so a job resumed early keeps its original timeout. It takes
-- the event name's advisory lock first (events.sql says why no wake-up is lost). It
-- returns ('event', payload), ('timeout', NULL), ('waiting', NULL), or ('lost', NULL)
-- when this run no longer holds the job.
CREATE OR REPLACE FUNCTION {{schema}}.wait_event(job bigint, attempt integer, worker text,
    step_position integer, event text, started timestamp with time zone,
    timeout_at timestamp with time zone)
 RETURNS TABLE(outcome text, payload text)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_variable
DECLARE
    held pg_catalog.int8;
    emitted pg_catalog.jsonb;
    found_event pg_catalog.bool;
    deadline pg_catalog.timestamptz;
    timed pg_catalog.bool;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('{{schema_name}}:event'), hashtext(event));
    SELECT j.id INTO held
    FROM {{schema}}.jobs j
    WHERE j.id = job AND j.attempts = attempt AND j.locked_by = worker AND j.status = 'running'
    FOR NO KEY UPDATE;
    IF held IS NULL THEN
        RETURN QUERY SELECT 'lost'::pg_catalog.text, NULL::pg_catalog.text;
        RETURN;
    END IF;
    SELECT e.payload, true INTO emitted, found_event
    FROM {{schema}}.events e WHERE e.name = event;
    IF found_event THEN
        INSERT INTO {{schema}}.job_steps (job_id, "position", name, kind, result, attempt,
                                          started_at)
        VALUES (job, step_position, 'event:' || event, 'event', jsonb_build_object('payload', emitted),
                attempt, started)
        ON CONFLICT DO NOTHING;
        DELETE FROM {{schema}}.job_waits w WHERE w.job_id = job;
        RETURN QUERY SELECT 'event'::pg_catalog.text, emitted::pg_catalog.text;
        RETURN;
    END IF;
    SELECT w.until INTO deadline
    FROM {{schema}}.job_waits w
    WHERE w.job_id = job AND w."position" = step_position AND w.event = event;
    IF NOT FOUND THEN
        deadline := timeout_at;
        INSERT INTO {{schema}}.job_waits AS w (job_id, "position", event, until)
        VALUES (job, step_position, event, deadline)
        ON CONFLICT ON CONSTRAINT job_waits_pkey DO UPDATE
        SET "position" = EXCLUDED."position", event = EXCLUDED.event, until = EXCLUDED.until,
            since = now();
    END IF;
    IF deadline IS NOT NULL AND deadline <= now() THEN
        INSERT INTO {{schema}}.job_steps (job_id, "position", name, kind, result, attempt,
                                          started_at)
        VALUES (job, step_position, 'event:' || event, 'event', '{"timeout": true}'::jsonb,
                attempt, started)
        ON CONFLICT DO NOTHING;
        DELETE FROM {{schema}}.job_waits w WHERE w.job_id = job;
        RETURN QUERY SELECT 'timeout'::pg_catalog.text, NULL::pg_catalog.text;
        RETURN;
    END IF;
    UPDATE {{schema}}.jobs j
    SET status = CASE WHEN j.idempotency_key IS NOT NULL THEN 'pending'
                      WHEN deadline IS NULL THEN 'waiting'
                      WHEN deadline > now() + interval '60 seconds' THEN 'waiting'
                      ELSE 'pending' END::{{schema}}.job_status,
        run_at = CASE WHEN deadline IS NOT NULL THEN deadline
                      WHEN j.idempotency_key IS NOT NULL THEN 'infinity'
                      ELSE j.run_at END,
        attempts = j.attempts - 1,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
    WHERE j.id = job
    RETURNING j.status = 'waiting' AND deadline IS NOT NULL INTO timed;
    -- A far deadline waits as a sleep does: its timer (sleep_job.sql says why written or
    -- deleted at every suspension).
    IF timed THEN
        INSERT INTO {{schema}}.job_timers AS t (job_id, due_at) VALUES (job, deadline)
        ON CONFLICT ON CONSTRAINT job_timers_pkey DO UPDATE SET due_at = EXCLUDED.due_at;
    ELSE
        DELETE FROM {{schema}}.job_timers t WHERE t.job_id = job;
    END IF;
    RETURN QUERY SELECT 'waiting'::pg_catalog.text, NULL::pg_catalog.text;
END
$function$;
REVOKE ALL ON FUNCTION {{schema}}.wait_event(bigint, integer, text, integer, text,
    timestamp with time zone, timestamp with time zone) FROM PUBLIC;
