-- aiopgq schema, version 8: the wake-up's NOTIFY path without nested queries.
--
-- Same decision, same locks, same NOTIFY as versions 4 and 6. In PL/pgSQL, PERFORM
-- runs a query through the executor (start-up and all), while assigning an
-- expression that reads no table is evaluated directly. The NOTIFY path ran three
-- queries: PERFORM notify_queue(...), and inside it PERFORM set_config(...) and the
-- pg_notify query. It now remembers the decision with an assignment and runs one
-- query (pg_notify, unless the queue is poll-only): a single-row INSERT that
-- notifies costs 253k server instructions instead of 272k (callgrind, PostgreSQL
-- 15; 209k when a worker is awake and it skips, 184k with no trigger). With many
-- producers and no worker awake, one transaction at a time takes this path.
CREATE OR REPLACE FUNCTION {{schema}}.wake_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    remembered text;
BEGIN
    IF current_setting('aiopgq.decided_{{schema_name}}', true) IS NOT DISTINCT FROM NEW.queue
       OR NEW.status <> 'pending' OR NEW.run_at > now() THEN
        RETURN NEW;  -- this transaction decided for the queue already, or nothing runnable
    END IF;
    -- Steps 1 and 2 of 0003_notify_once.sql, nested because SQL promises no
    -- evaluation order and the registration must come first.
    IF pg_try_advisory_xact_lock_shared(hashtext('{{schema_name}}:skip'), hashtext(NEW.queue)) THEN
        IF NOT pg_try_advisory_xact_lock(hashtext('{{schema_name}}:awake'), hashtext(NEW.queue)) THEN
            RETURN NEW;  -- covered by an awake worker or a producer already notifying
        END IF;
    END IF;
    remembered := set_config('aiopgq.decided_{{schema_name}}', NEW.queue, true);
    PERFORM pg_notify('{{schema_name}}', NEW.queue)
    WHERE NOT EXISTS (
        SELECT 1 FROM {{schema}}.queues s WHERE s.queue = NEW.queue AND NOT s.notify);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.wake_once(q text, run_at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    remembered text;
BEGIN
    IF run_at > now()
       OR current_setting('aiopgq.decided_{{schema_name}}', true) IS NOT DISTINCT FROM q THEN
        RETURN true;
    END IF;
    IF pg_try_advisory_xact_lock_shared(hashtext('{{schema_name}}:skip'), hashtext(q)) THEN
        IF NOT pg_try_advisory_xact_lock(hashtext('{{schema_name}}:awake'), hashtext(q)) THEN
            remembered := set_config('aiopgq.decided_{{schema_name}}', q, true);
            RETURN true;
        END IF;
    END IF;
    remembered := set_config('aiopgq.decided_{{schema_name}}', q, true);
    PERFORM pg_notify('{{schema_name}}', q)
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queues s WHERE s.queue = q AND NOT s.notify);
    RETURN true;
END
$$;

DROP FUNCTION {{schema}}.notify_queue(text);
