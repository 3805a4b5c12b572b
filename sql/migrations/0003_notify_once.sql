-- aiopgq schema, version 3: NOTIFY only when a wake-up is needed.
--
-- A notifying transaction takes a cluster-wide lock at commit and holds it across
-- its WAL flush, so concurrent notifying commits serialize and lose group commit.
-- So per queue at most one notifying transaction is in flight; the others skip
-- their NOTIFY, which is safe because they first register as skippers:
--
--   producer (per distinct runnable queue q of the statement)
--     1. try SHARED lock (skip, q) for the rest of the transaction.
--        Fails only while a worker is draining (below): then just NOTIFY.
--     2. try EXCLUSIVE lock (notify, q). Won: NOTIFY (delivered at our commit).
--        Lost: another transaction holds it and has not committed yet, so its
--        NOTIFY arrives after our registration in step 1: skip ours.
--   worker, before it sleeps after any NOTIFY for q: takes the EXCLUSIVE lock
--     (skip, q), which waits until every registered skipper has ended (locks are
--     released after the commit is visible), then fetches again.
--
-- A job whose NOTIFY was skipped is therefore always followed by a fetch after its
-- commit, however long its transaction ran (the worker-side half is in _fetcher.py).
CREATE OR REPLACE FUNCTION {{schema}}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    skip_class integer := hashtext(TG_TABLE_SCHEMA || ':skip');
    notify_class integer := hashtext(TG_TABLE_SCHEMA || ':notify');
BEGIN
    FOR q IN
        SELECT DISTINCT n.queue FROM new_jobs n
        WHERE n.status = 'pending' AND n.run_at <= now()
          AND NOT EXISTS (
              SELECT 1 FROM {{schema}}.queues s WHERE s.queue = n.queue AND NOT s.notify)
    LOOP
        IF pg_try_advisory_xact_lock_shared(skip_class, hashtext(q)) THEN
            IF NOT pg_try_advisory_xact_lock(notify_class, hashtext(q)) THEN
                CONTINUE;  -- covered by the in-flight notifier's wake-up
            END IF;
        END IF;
        PERFORM pg_notify(TG_TABLE_SCHEMA, q);
    END LOOP;
    RETURN NULL;
END
$$;
