-- Waking workers: the insert trigger on jobs (wake_on_insert) and the same decision for
-- a batch (wake_once) send a NOTIFY (channel: the schema's name; payload: the queue's
-- name) only when a wake-up is needed. Jobs that run later (run_at in the future) and
-- queues switched to poll-only (queues.notify false) send nothing. The trigger also
-- refuses payloads over the size limit (payload_limit.sql).
--
-- The protocol. A notifying transaction takes a cluster-wide lock at commit and holds it
-- across its WAL flush, so concurrent notifying commits serialize and lose group commit.
-- Producers therefore skip their NOTIFY whenever a wake-up is already covered, using two
-- advisory locks per queue q, (skip, q) and (awake, q):
--
--   producer, per runnable row of queue q:
--     1. try SHARED (skip, q) until our transaction ends: registers us as a
--        possible skipper. Fails only while a worker drains (below): NOTIFY.
--     2. try EXCLUSIVE (awake, q) until our transaction ends.
--        Won: no worker is awake and no other producer is deciding: NOTIFY.
--        Lost: a worker holds it SHARED (it is awake and will fetch again before it
--        sleeps), or another producer holds it and its NOTIFY is delivered at its
--        commit, after our registration: skip ours.
--   worker (aiopgq/_worker/awake.py, sql/wake/): holds (awake, q) SHARED, a session lock
--     on its LISTEN connection, while it is fetching. Before it sleeps it releases that,
--     then takes (skip, q) EXCLUSIVE, which waits until every registered producer has
--     ended (locks are released after the commit is visible), then fetches again. It
--     does the same after any NOTIFY for q.
--
-- So a job whose NOTIFY was skipped is always followed by a fetch after its commit,
-- however long its transaction ran. Steps 1 and 2 are nested IFs, not AND/OR: SQL
-- promises no evaluation order, and the registration must come before the check.
--
-- Once per transaction and queue. The decision holds for the rest of the transaction
-- (the locks are transaction locks and NOTIFY is sent at commit), so after a NOTIFY the
-- queue is remembered in a transaction-local setting (aiopgq.decided_<schema>) and later
-- rows of it return at once. The trigger's skip path does not remember it (set_config
-- costs as much as the rest), so a large raw INSERT ... SELECT in a busy queue pays the
-- lock calls per row (COPY too: a wake_once() call before the COPY costs more round
-- trips than it saves); the bulk enqueues (sql/enqueue/insert_jobs*.sql) call
-- wake_once() before their rows, which always remembers, and the trigger then returns
-- at once for every row. wake_once() returns true so that it can gate an INSERT ...
-- SELECT.
--
-- Why the trigger is written as it is; each choice is the cheaper one per insert:
-- - A row-level trigger reading NEW, the two lock calls plain expressions: a
--   statement-level trigger would query its transition table, and that query's executor
--   start-up costs a large part of a single-row INSERT.
-- - No WHEN clause: PostgreSQL rebuilds a trigger's WHEN expression for every statement,
--   which costs more than the function call it saves on single-row inserts.
-- - BEFORE INSERT, not AFTER: the protocol only needs the locks held from the insert to
--   the commit, and an AFTER row trigger queues each row as an event, fetched again by
--   its TID at the end of the statement (COPY keeps a tuple slot per buffered row for
--   it). A BEFORE row trigger returning NULL would drop the row, so every branch returns
--   NEW. A row that ON CONFLICT then skips (an idempotency key) has still made the
--   decision: at worst one spare NOTIFY.
-- - No nested queries on the NOTIFY path: in PL/pgSQL, PERFORM runs a query through the
--   executor (start-up and all), while assigning an expression that reads no table is
--   evaluated directly. So the decision is remembered with an assignment, and the one
--   query is the pg_notify (unless the queue is poll-only). With many producers and no
--   worker awake, one transaction at a time takes this path.
-- - `remembered pg_catalog.text`, qualified: PL/pgSQL compiles a function once per
--   session, resolving the types of its DECLARE section with the search_path of that
--   first call, and keeps them. The trigger runs as its caller, and also inside
--   enqueue_unique() and take_ticks(), as their owner: a producer that first fired it
--   with its own search_path (where pg_temp comes first for types) would have a
--   `remembered text` compiled as its pg_temp.text, whose CHECK would then run as the
--   owner in its next keyed enqueue. Statements are re-planned under the definer's
--   search_path (the plan cache checks it); only the declarations stay. wake_once()
--   never runs inside a definer function; it gets the same declaration, so that a
--   future one calling it is safe too. (sql/README.md: definer functions.)

-- The insert trigger's function: refuse a new job's payload over the limit, then make
-- the wake-up decision for NEW's queue (NOTIFY at commit, or skip).
CREATE OR REPLACE FUNCTION {{schema}}.wake_on_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    remembered pg_catalog.text;
BEGIN
    -- The payload size limit of new jobs (payload_limit.sql); a value copied from a table
    -- may arrive compressed, and is then measured decompressed (`|| '{}'` detoasts it).
    IF NEW.attempts = 0 AND (
           pg_column_size(NEW.payload) > {{schema}}.payload_limit()
           OR (pg_column_compression(NEW.payload) IS NOT NULL
               AND pg_column_size(NEW.payload || '{}'::jsonb) > {{schema}}.payload_limit())) THEN
        RAISE EXCEPTION 'payload of task % is % bytes, over the limit of % bytes of schema %',
                NEW.task, pg_column_size(NEW.payload || '{}'::jsonb), {{schema}}.payload_limit(),
                '{{schema_name}}'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_payload_max_bytes',
                  HINT = 'store large data elsewhere and pass a reference, or have the '
                         'schema''s owner raise the limit: SELECT {{schema_name}}.set_max_payload_bytes(n)';
    END IF;
    IF current_setting('aiopgq.decided_{{schema_name}}', true) IS NOT DISTINCT FROM NEW.queue
       OR NEW.status <> 'pending' OR NEW.run_at > now() THEN
        RETURN NEW;  -- this transaction decided for the queue already, or nothing runnable
    END IF;
    -- Steps 1 and 2 of the protocol (the header above), nested because SQL promises no
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
$function$;

-- The same decision for a whole batch of queue q, made before its rows are inserted
-- (nothing when the batch runs later, at run_at); always true.
CREATE OR REPLACE FUNCTION {{schema}}.wake_once(q text, run_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    remembered pg_catalog.text;
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
$function$;

-- Per row, BEFORE INSERT (see the header).
CREATE OR REPLACE TRIGGER jobs_wake BEFORE INSERT ON {{schema}}.jobs
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.wake_on_insert();
