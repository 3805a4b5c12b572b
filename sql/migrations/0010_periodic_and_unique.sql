-- aiopgq schema, version 10: periodic jobs (schedules and their ticks) and unique jobs
-- (idempotency keys on every enqueue path, kept for a while after the job is done, and
-- three answers to a duplicate).
--
-- Neither touches the plain paths: an enqueue without a key, a claim and a completion
-- run the statements they ran before. The two new columns are NULL on every other row
-- (a NULL costs a bit in the null bitmap the row already has), and the two partial
-- indexes below hold only rows that have a key or a tick.

ALTER TABLE {{schema}}.jobs
    ADD COLUMN tick timestamptz,        -- the schedule time of a periodic job
    ADD COLUMN unique_for interval;     -- how long a done job keeps its idempotency key

-- Periodic jobs --------------------------------------------------------------------------

-- One job per task and tick: whatever any worker computes, a tick is enqueued once.
CREATE UNIQUE INDEX jobs_tick_idx ON {{schema}}.jobs (task, tick) WHERE tick IS NOT NULL;

-- One row per periodic task, written by the workers that run it. `last_tick` only moves
-- forward, by take_ticks() below (compare and set), so two workers that find the same
-- ticks due cannot both enqueue them.
CREATE TABLE {{schema}}.schedules (
    name          text PRIMARY KEY,                  -- the periodic task's name
    cron          text NOT NULL,
    timezone      text NOT NULL,
    missed        text NOT NULL,                     -- latest | skip | all
    queue         text NOT NULL,
    since         timestamptz NOT NULL DEFAULT now(),  -- ticks after this are due
    last_tick     timestamptz,                       -- the newest tick taken (run or dropped)
    last_worker   text,                              -- the worker that took it
    registered_at timestamptz NOT NULL DEFAULT now()   -- when a worker last registered it
);

-- Take the ticks of schedule `name` from `expected` (the last tick the caller read) up to
-- `latest`, and enqueue `ticks` (with their payloads) in the same statement. Under READ
-- COMMITTED a concurrent caller with the same `expected` waits for the row lock, then
-- finds last_tick moved and takes nothing. SECURITY DEFINER: a worker role may enqueue
-- periodic ticks, and nothing else (it has no INSERT on jobs).
CREATE FUNCTION {{schema}}.take_ticks(
    name text, expected timestamptz, latest timestamptz, worker text, queue text,
    priority integer, max_attempts integer, ticks timestamptz[], payloads text[]
) RETURNS TABLE (taken boolean, ids bigint[])
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS $$
    WITH advanced AS (
        UPDATE {{schema}}.schedules s
        SET last_tick = take_ticks.latest, last_worker = take_ticks.worker
        WHERE s.name = take_ticks.name AND s.last_tick IS NOT DISTINCT FROM take_ticks.expected
        RETURNING s.name
    ), inserted AS (
        INSERT INTO {{schema}}.jobs
            (task, payload, queue, priority, max_attempts, run_at, tick, enqueued_by)
        SELECT a.name, t.payload::jsonb, take_ticks.queue, take_ticks.priority,
               take_ticks.max_attempts, t.tick, t.tick, session_user
        FROM advanced a, unnest(take_ticks.ticks, take_ticks.payloads) AS t(tick, payload)
        ON CONFLICT (task, tick) WHERE tick IS NOT NULL DO NOTHING
        RETURNING id, tick
    )
    SELECT EXISTS (SELECT FROM advanced),
           coalesce((SELECT array_agg(i.id ORDER BY i.tick) FROM inserted i), '{}');
$$;
REVOKE ALL ON FUNCTION {{schema}}.take_ticks(text, timestamptz, timestamptz, text, text,
    integer, integer, timestamptz[], text[]) FROM PUBLIC;

-- Unique jobs ----------------------------------------------------------------------------

-- A key is held by its live job, and by a done job that has a window (unique_for) until
-- enqueue_unique() finds the window over and releases it (or the pruner deletes the row,
-- which it does not do within the window: see prune.sql). Failed and cancelled jobs
-- release their key: they did not do the work.
DROP INDEX {{schema}}.jobs_idempotency_key_idx;
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON {{schema}}.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL
      AND (status IN ('pending', 'running') OR (status = 'done' AND unique_for IS NOT NULL));

-- Enqueue jobs of one task, each with an idempotency key or none, in one call; one row
-- per item, in any order: `ord` (1-based) is the item, `outcome` says what happened:
--   inserted   a new job (only id, run_at and created_at are filled: the caller has the rest)
--   duplicate  the key is held: the holder's row, unchanged
--   replaced   on_conflict 'replace' and the holder was pending: its row with the new
--              payload and run_at (a running or done holder is returned as a duplicate)
-- With on_conflict 'raise' a held key raises unique_violation (constraint
-- jobs_idempotency_key_idx) with the holder as JSON in DETAIL, and nothing is enqueued.
-- Items are settled in order, so an item whose key an earlier item of the same call took
-- is a duplicate of that one.
--
-- SECURITY DEFINER so that a producer role (INSERT on some columns, no SELECT) can have
-- the holder back; it gets it only if it enqueued it (enqueued_by, as job_status()) or
-- may read jobs' payloads (may update them, to replace).
CREATE FUNCTION {{schema}}.enqueue_unique(
    task text,
    payloads jsonb,                    -- a JSON array of payload objects
    keys text[],                       -- one key per payload (NULL: none)
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT NULL,   -- NULL: now
    max_attempts integer DEFAULT 5,
    unique_for interval DEFAULT NULL,
    on_conflict text DEFAULT 'ignore'
) RETURNS TABLE (
    ord integer, outcome text, id bigint, job_queue text, job_task text, payload text,
    status text, job_priority integer, attempts integer, job_max_attempts integer,
    job_run_at timestamptz,
    locked_by text, heartbeat_at timestamptz, last_error text, result text,
    created_at timestamptz, finished_at timestamptz, tick timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
#variable_conflict use_column
DECLARE
    n integer := jsonb_array_length(enqueue_unique.payloads);
    run_time timestamptz := coalesce(enqueue_unique.run_at, now());
    settled integer[] := '{}';         -- items the set-based statements inserted
    ords integer[];
    ids bigint[];
    item integer;
    k text;
    holder {{schema}}.jobs;
    new_id bigint;
    result_of text;
    tries integer;
BEGIN
    IF enqueue_unique.on_conflict IS NULL
       OR enqueue_unique.on_conflict NOT IN ('ignore', 'replace', 'raise') THEN
        RAISE EXCEPTION 'on_conflict must be ''ignore'', ''replace'' or ''raise'', not %',
            coalesce(quote_literal(enqueue_unique.on_conflict), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(cardinality(enqueue_unique.keys), 0) <> n THEN
        RAISE EXCEPTION '% payloads but % idempotency keys: pass one key (or NULL) per payload',
            n, coalesce(cardinality(enqueue_unique.keys), 0)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF n > 1 THEN
        -- Items without a key, in one statement (identity values drawn in item order).
        WITH items AS (
            SELECT e.ord::integer AS ord, e.payload
            FROM jsonb_array_elements(enqueue_unique.payloads) WITH ORDINALITY AS e(payload, ord)
            WHERE enqueue_unique.keys[e.ord] IS NULL
        ), inserted AS (
            INSERT INTO {{schema}}.jobs
                (task, payload, queue, priority, run_at, max_attempts, enqueued_by)
            SELECT enqueue_unique.task, i.payload, enqueue_unique.queue, enqueue_unique.priority,
                   run_time, enqueue_unique.max_attempts, session_user
            FROM items i ORDER BY i.ord
            RETURNING id
        )
        SELECT (SELECT coalesce(array_agg(i.ord ORDER BY i.ord), '{}') FROM items i),
               (SELECT coalesce(array_agg(x.id ORDER BY x.id), '{}') FROM inserted x)
        INTO ords, ids;
        settled := ords;
        RETURN QUERY SELECT s.ord, 'inserted'::text, s.id, NULL::text, NULL::text, NULL::text,
                            NULL::text, NULL::integer, NULL::integer, NULL::integer, run_time,
                            NULL::text, NULL::timestamptz, NULL::text, NULL::text, now(),
                            NULL::timestamptz, NULL::timestamptz
                     FROM unnest(ords, ids) AS s(ord, id);

        -- The first item of each key, where no job holds the key, in one statement; in
        -- key order, so that calls sharing keys take them in the same order and cannot
        -- deadlock on each other's uncommitted rows.
        WITH firsts AS (
            SELECT DISTINCT ON (enqueue_unique.keys[e.ord])
                   e.ord::integer AS ord, e.payload, enqueue_unique.keys[e.ord] AS key
            FROM jsonb_array_elements(enqueue_unique.payloads) WITH ORDINALITY AS e(payload, ord)
            WHERE enqueue_unique.keys[e.ord] IS NOT NULL
            ORDER BY enqueue_unique.keys[e.ord], e.ord
        ), inserted AS (
            INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts,
                                         idempotency_key, unique_for, enqueued_by)
            SELECT enqueue_unique.task, f.payload, enqueue_unique.queue, enqueue_unique.priority,
                   run_time, enqueue_unique.max_attempts, f.key, enqueue_unique.unique_for,
                   session_user
            FROM firsts f ORDER BY f.key
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL
                AND (status IN ('pending', 'running') OR (status = 'done' AND unique_for IS NOT NULL))
            DO NOTHING
            RETURNING id, idempotency_key
        )
        SELECT coalesce(array_agg(f.ord), '{}'), coalesce(array_agg(x.id), '{}')
        INTO ords, ids
        FROM inserted x JOIN firsts f ON f.key = x.idempotency_key;
        settled := settled || ords;
        RETURN QUERY SELECT s.ord, 'inserted'::text, s.id, NULL::text, NULL::text, NULL::text,
                            NULL::text, NULL::integer, NULL::integer, NULL::integer, run_time,
                            NULL::text, NULL::timestamptz, NULL::text, NULL::text, now(),
                            NULL::timestamptz, NULL::timestamptz
                     FROM unnest(ords, ids) AS s(ord, id);
    END IF;

    -- Every other item, one at a time: its key is held (by an older job or an earlier
    -- item of this call), or it is the only item. By key, then in order: the items of
    -- one key settle in order (the first inserts, the last replaces), and calls that
    -- replace common holders lock them in the same order.
    FOR item IN
        SELECT g FROM generate_series(1, n) AS g
        WHERE g <> ALL (settled)
        ORDER BY enqueue_unique.keys[g], g
    LOOP
        k := enqueue_unique.keys[item];
        IF k IS NULL THEN  -- only when n = 1: the passes above took the others
            INSERT INTO {{schema}}.jobs
                (task, payload, queue, priority, run_at, max_attempts, enqueued_by)
            VALUES (enqueue_unique.task, enqueue_unique.payloads -> 0, enqueue_unique.queue,
                    enqueue_unique.priority, run_time, enqueue_unique.max_attempts, session_user)
            RETURNING id INTO new_id;
            RETURN QUERY SELECT item, 'inserted'::text, new_id, NULL::text, NULL::text, NULL::text,
                                NULL::text, NULL::integer, NULL::integer, NULL::integer, run_time,
                                NULL::text, NULL::timestamptz, NULL::text, NULL::text, now(),
                                NULL::timestamptz, NULL::timestamptz;
            CONTINUE;
        END IF;
        tries := 0;
        LOOP
            tries := tries + 1;
            IF tries > 10 THEN  -- the key keeps changing hands: let the caller retry
                RAISE EXCEPTION 'idempotency key % changed hands 10 times while enqueuing', quote_literal(k)
                    USING ERRCODE = 'serialization_failure';
            END IF;
            new_id := NULL;
            INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts,
                                         idempotency_key, unique_for, enqueued_by)
            VALUES (enqueue_unique.task, enqueue_unique.payloads -> (item - 1),
                    enqueue_unique.queue, enqueue_unique.priority, run_time,
                    enqueue_unique.max_attempts, k, enqueue_unique.unique_for, session_user)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL
                AND (status IN ('pending', 'running') OR (status = 'done' AND unique_for IS NOT NULL))
            DO NOTHING
            RETURNING id INTO new_id;
            IF new_id IS NOT NULL THEN
                RETURN QUERY SELECT item, 'inserted'::text, new_id, NULL::text, NULL::text,
                                    NULL::text, NULL::text, NULL::integer, NULL::integer,
                                    NULL::integer, run_time, NULL::text, NULL::timestamptz, NULL::text,
                                    NULL::text, now(), NULL::timestamptz, NULL::timestamptz;
                EXIT;
            END IF;
            -- A fresh snapshot (READ COMMITTED): the holder that made the insert do nothing.
            SELECT * INTO holder FROM {{schema}}.jobs j
            WHERE j.idempotency_key = k
              AND (j.status IN ('pending', 'running') OR (j.status = 'done' AND j.unique_for IS NOT NULL));
            IF NOT FOUND THEN
                CONTINUE;  -- it finished (and let go of the key) in between: insert again
            END IF;
            IF holder.status = 'done' AND holder.finished_at + holder.unique_for <= now() THEN
                -- Its window is over: take it out of the index, then insert again.
                UPDATE {{schema}}.jobs j SET unique_for = NULL
                WHERE j.id = holder.id AND j.status = 'done';
                CONTINUE;
            END IF;
            IF holder.enqueued_by IS DISTINCT FROM session_user AND NOT has_column_privilege(
                   session_user, '{{schema}}.jobs'::regclass, 'payload',
                   CASE WHEN enqueue_unique.on_conflict = 'replace' THEN 'UPDATE' ELSE 'SELECT' END)
            THEN
                RAISE EXCEPTION 'idempotency key % is held by job %, which another role enqueued',
                    quote_literal(k), holder.id
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'keys are shared by every role: give each producer its own prefix';
            END IF;
            IF enqueue_unique.on_conflict = 'raise' THEN
                RAISE EXCEPTION 'idempotency key % is held by job % (%)',
                    quote_literal(k), holder.id, holder.status
                    USING ERRCODE = 'unique_violation',
                          SCHEMA = '{{schema_name}}', TABLE = 'jobs',
                          CONSTRAINT = 'jobs_idempotency_key_idx',
                          DETAIL = jsonb_build_object(
                              'id', holder.id, 'queue', holder.queue, 'task', holder.task,
                              'payload', holder.payload, 'status', holder.status,
                              'priority', holder.priority, 'attempts', holder.attempts,
                              'max_attempts', holder.max_attempts,
                              'run_at', extract(epoch FROM holder.run_at),
                              'locked_by', holder.locked_by,
                              'heartbeat_at', extract(epoch FROM holder.heartbeat_at),
                              'last_error', holder.last_error, 'result', holder.result,
                              'created_at', extract(epoch FROM holder.created_at),
                              'finished_at', extract(epoch FROM holder.finished_at),
                              'tick', extract(epoch FROM holder.tick))::text,
                          HINT = 'on_conflict ''ignore'' returns the existing job instead';
            END IF;
            result_of := 'duplicate';
            IF enqueue_unique.on_conflict = 'replace' AND holder.status = 'pending' THEN
                UPDATE {{schema}}.jobs j
                SET payload = enqueue_unique.payloads -> (item - 1), run_at = run_time
                WHERE j.id = holder.id AND j.status = 'pending'
                RETURNING * INTO holder;
                IF NOT FOUND THEN
                    CONTINUE;  -- claimed or cancelled in between: decide again
                END IF;
                result_of := 'replaced';
            END IF;
            RETURN QUERY SELECT item, result_of, holder.id, holder.queue, holder.task,
                                holder.payload::text, holder.status::text, holder.priority,
                                holder.attempts, holder.max_attempts, holder.run_at,
                                holder.locked_by, holder.heartbeat_at, holder.last_error,
                                holder.result::text, holder.created_at, holder.finished_at,
                                holder.tick;
            EXIT;
        END LOOP;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.enqueue_unique(text, jsonb, text[], text, integer,
    timestamptz, integer, interval, text) FROM PUBLIC;

-- The SQL contract, with keys: every call that worked before works the same (the old
-- function has to go: a second one with more defaulted arguments would make every
-- existing call ambiguous). Returns the id of the new job, or of the job holding the key.
--   SELECT aiopgq.enqueue('task.name', '{"a": 1}', idempotency_key => 'order-42');
DROP FUNCTION {{schema}}.enqueue(text, jsonb, text, timestamptz, integer, integer);
CREATE FUNCTION {{schema}}.enqueue(
    task text,
    payload jsonb DEFAULT '{}'::jsonb,
    queue text DEFAULT 'default',
    run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT 5,
    idempotency_key text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    on_conflict text DEFAULT 'ignore'
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
BEGIN
    IF enqueue.idempotency_key IS NULL THEN
        IF enqueue.unique_for IS NOT NULL OR enqueue.on_conflict IS DISTINCT FROM 'ignore' THEN
            RAISE EXCEPTION 'unique_for and on_conflict need an idempotency_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        INSERT INTO {{schema}}.jobs (task, payload, queue, run_at, priority, max_attempts)
        VALUES (enqueue.task, coalesce(enqueue.payload, '{}'::jsonb), enqueue.queue,
                coalesce(enqueue.run_at, now()), enqueue.priority, enqueue.max_attempts)
        RETURNING id INTO new_id;
        RETURN new_id;
    END IF;
    SELECT u.id INTO new_id
    FROM {{schema}}.enqueue_unique(
        enqueue.task, jsonb_build_array(coalesce(enqueue.payload, '{}'::jsonb)),
        ARRAY[enqueue.idempotency_key], enqueue.queue, enqueue.priority, enqueue.run_at,
        enqueue.max_attempts, enqueue.unique_for, enqueue.on_conflict) AS u;
    RETURN new_id;
END
$$;

-- Roles (see 0002_roles.sql): producers may also enqueue with keys; workers may also
-- register schedules and enqueue their ticks (through take_ticks, not INSERT on jobs).
CREATE OR REPLACE FUNCTION {{schema}}.grant_producer(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT INSERT (task, payload, queue, priority, run_at, max_attempts, '
                   'idempotency_key) ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT (id, run_at, created_at, idempotency_key, status) '
                   'ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.enqueue(text, jsonb, text, timestamptz, '
                   'integer, integer, text, interval, text), %I.enqueue_unique(text, jsonb, '
                   'text[], text, integer, timestamptz, integer, interval, text), '
                   '%I.job_status(bigint) TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.grant_worker(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.schedules TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.take_ticks(text, timestamptz, timestamptz, '
                   'text, text, integer, integer, timestamptz[], text[]) TO %I',
                   '{{schema_name}}', role_name);
END
$$;

-- Roles granted before this version get the same: producers are the roles that may run
-- job_status(), workers those that may update jobs (other than the owner).
DO $$
DECLARE
    r name;
BEGIN
    FOR r IN
        SELECT a.rolname FROM pg_proc p, aclexplode(p.proacl) x, pg_roles a
        WHERE p.oid = '{{schema}}.job_status(bigint)'::regprocedure
          AND x.privilege_type = 'EXECUTE' AND a.oid = x.grantee AND x.grantee <> p.proowner
    LOOP
        PERFORM {{schema}}.grant_producer(r);
    END LOOP;
    FOR r IN
        SELECT a.rolname FROM pg_class c, aclexplode(c.relacl) x, pg_roles a
        WHERE c.oid = '{{schema}}.jobs'::regclass
          AND x.privilege_type = 'UPDATE' AND a.oid = x.grantee AND x.grantee <> c.relowner
    LOOP
        PERFORM {{schema}}.grant_worker(r);
    END LOOP;
END
$$;
