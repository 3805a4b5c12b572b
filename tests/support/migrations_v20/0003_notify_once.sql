-- aiopgq schema, version 3: NOTIFY only when a wake-up is needed.
--
-- A notifying transaction takes a cluster-wide lock at commit and holds it across
-- its WAL flush, so concurrent notifying commits serialize and lose group commit.
-- Producers therefore skip their NOTIFY whenever a wake-up is already covered,
-- using three transaction- or session-scoped advisory locks per queue q:
--
--   producer, per distinct runnable queue q of an INSERT statement:
--     1. try SHARED (skip, q) until our transaction ends: registers us as a
--        possible skipper. Fails only while a worker drains (below): NOTIFY.
--     2. try EXCLUSIVE (awake, q) until our transaction ends.
--        Won: no worker is awake and no other producer is deciding: NOTIFY.
--        Lost: a worker holds it SHARED (it is awake and will drain before it
--        sleeps), or another producer holds it and its NOTIFY is delivered at
--        its commit, after our registration: skip ours.
--   worker: holds (awake, q) SHARED on its LISTEN connection while it is
--     fetching. Before it sleeps it releases that, then takes (skip, q)
--     EXCLUSIVE, which waits until every registered producer has ended (locks
--     are released after the commit is visible), then fetches again. It does the
--     same after any NOTIFY for q.
--
-- So a job whose NOTIFY was skipped is always followed by a fetch after its
-- commit, however long its transaction ran. The worker half is in _fetcher.py.
CREATE OR REPLACE FUNCTION {{schema}}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    skip_class integer := hashtext(TG_TABLE_SCHEMA || ':skip');
    awake_class integer := hashtext(TG_TABLE_SCHEMA || ':awake');
BEGIN
    FOR q IN
        SELECT DISTINCT n.queue FROM new_jobs n
        WHERE n.status = 'pending' AND n.run_at <= now()
          AND NOT EXISTS (
              SELECT 1 FROM {{schema}}.queues s WHERE s.queue = n.queue AND NOT s.notify)
    LOOP
        -- Nested, not AND/OR: SQL does not promise an evaluation order, and the
        -- registration (step 1) must come before the check (step 2).
        IF pg_try_advisory_xact_lock_shared(skip_class, hashtext(q)) THEN
            IF NOT pg_try_advisory_xact_lock(awake_class, hashtext(q)) THEN
                CONTINUE;  -- covered: see above
            END IF;
        END IF;
        PERFORM pg_notify(TG_TABLE_SCHEMA, q);
    END LOOP;
    RETURN NULL;
END
$$;
