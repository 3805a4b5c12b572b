-- aiopgq schema, version 4: the wake-up decision of version 3, made without a query.
--
-- The protocol is unchanged (see 0003_notify_once.sql and _fetcher.py); only where
-- the producer runs it moves. Version 3 ran it in a statement-level trigger that
-- queried the transition table (SELECT DISTINCT queue ... NOT EXISTS queues). That
-- query's executor start-up cost about 40% of a single-row INSERT's server
-- instructions (callgrind, PostgreSQL 15: 194k instructions per insert with no
-- trigger, +82k with that trigger). A row-level trigger reads NEW directly and runs
-- the two lock calls as plain expressions: +30k.
--
-- The decision holds for the rest of the transaction (the locks are transaction
-- locks and NOTIFY is sent at commit), so it is made once per transaction and
-- queue: after a NOTIFY the queue is remembered in a transaction-local setting and
-- later rows of it return at once. The skip path does not remember it (set_config
-- costs as much as the rest), so a large raw INSERT ... SELECT in a busy queue pays
-- the lock calls per row (copy_many too: a wake_once() call before the COPY costs
-- more round trips than it saves); enqueue_many calls wake_once() before its rows,
-- which always remembers.
--
-- No WHEN clause: PostgreSQL rebuilds a trigger's WHEN expression for every
-- statement, which costs more than the function call it saves on single-row inserts.
DROP TRIGGER jobs_notify ON {{schema}}.jobs;
DROP FUNCTION {{schema}}.notify_jobs();

-- NOTIFY workers of queue q at commit, unless q is poll-only; remember the decision.
CREATE FUNCTION {{schema}}.notify_queue(q text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('aiopgq.decided_{{schema_name}}', q, true);
    PERFORM pg_notify('{{schema_name}}', q)
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queues s WHERE s.queue = q AND NOT s.notify);
END
$$;

CREATE FUNCTION {{schema}}.wake_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('aiopgq.decided_{{schema_name}}', true) IS NOT DISTINCT FROM NEW.queue
       OR NEW.status <> 'pending' OR NEW.run_at > now() THEN
        RETURN NULL;  -- this transaction decided for the queue already, or nothing runnable
    END IF;
    -- Steps 1 and 2 of 0003_notify_once.sql, nested because SQL promises no
    -- evaluation order and the registration must come first.
    IF pg_try_advisory_xact_lock_shared(hashtext('{{schema_name}}:skip'), hashtext(NEW.queue)) THEN
        IF NOT pg_try_advisory_xact_lock(hashtext('{{schema_name}}:awake'), hashtext(NEW.queue)) THEN
            RETURN NULL;  -- covered by an awake worker or a producer already notifying
        END IF;
    END IF;
    PERFORM {{schema}}.notify_queue(NEW.queue);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_wake AFTER INSERT ON {{schema}}.jobs
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.wake_on_insert();

-- The same decision for a whole batch of queue q, made before its rows are inserted
-- (bulk enqueues call it once; the trigger then returns at once for every row).
-- Returns true so that it can gate an INSERT ... SELECT.
CREATE FUNCTION {{schema}}.wake_once(q text, run_at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF run_at > now()
       OR current_setting('aiopgq.decided_{{schema_name}}', true) IS NOT DISTINCT FROM q THEN
        RETURN true;
    END IF;
    IF pg_try_advisory_xact_lock_shared(hashtext('{{schema_name}}:skip'), hashtext(q)) THEN
        IF NOT pg_try_advisory_xact_lock(hashtext('{{schema_name}}:awake'), hashtext(q)) THEN
            PERFORM set_config('aiopgq.decided_{{schema_name}}', q, true);
            RETURN true;
        END IF;
    END IF;
    PERFORM {{schema}}.notify_queue(q);
    RETURN true;
END
$$;
