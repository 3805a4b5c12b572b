-- aiopgq schema, version 6: the wake-up trigger of version 4 fires BEFORE INSERT.
--
-- Same decision, same locks, same NOTIFY at commit (see 0004_wake_per_row.sql);
-- only the moment within the transaction moves, and the protocol only needs the
-- locks to be held from the insert to the commit. An AFTER row trigger costs more:
-- each row is queued as an event and fetched again by its TID at the end of the
-- statement, and COPY keeps a tuple slot per buffered row for it. Server
-- instructions per row (callgrind, PostgreSQL 15, `python -m benchmarks.instructions`):
-- single-row INSERT 217k -> 213k, enqueue_many 50.1k -> 48.4k, copy_many 60.2k -> 50.8k.
--
-- A BEFORE row trigger returning NULL would drop the row, so every branch returns
-- NEW. A row that ON CONFLICT then skips (idempotency key) has still made the
-- decision: at worst one spare NOTIFY.
CREATE OR REPLACE FUNCTION {{schema}}.wake_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
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
    PERFORM {{schema}}.notify_queue(NEW.queue);
    RETURN NEW;
END
$$;

DROP TRIGGER jobs_wake ON {{schema}}.jobs;
CREATE TRIGGER jobs_wake BEFORE INSERT ON {{schema}}.jobs
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.wake_on_insert();
