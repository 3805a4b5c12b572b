-- aiopgq schema, version 10: periodic jobs (schedules and their ticks) and unique jobs
-- (idempotency keys on every enqueue path, kept for a while after the job is done, and
-- three answers to a duplicate).
--
-- Both live in tables of their own: the jobs table, its indexes and the statements of
-- the plain paths (an enqueue without a key, a claim, a completion) are what they
-- were. A column or a partial index on jobs costs every insert and every claim
-- (callgrind, PostgreSQL 18: `tick` and `unique_for` columns plus a (task, tick)
-- index and a wider key predicate made a single-row INSERT 194k -> 209k server
-- instructions and a drained job 110.8k -> 113.6k).

-- Periodic jobs --------------------------------------------------------------------------

-- One row per periodic task, written by the workers that run it. `last_tick` only moves
-- forward, by take_ticks() below (compare and set), so of the workers that find the
-- same ticks due, one enqueues them.
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

-- The job of each tick: one per task and tick time (a second one aborts the statement
-- that inserts it, jobs and all). Rows go with their jobs (prune.sql).
CREATE TABLE {{schema}}.periodic_ticks (
    name   text NOT NULL,
    tick   timestamptz NOT NULL,
    job_id bigint NOT NULL UNIQUE,
    PRIMARY KEY (name, tick)
);

-- Take the ticks of schedule `name` from `expected` (the last tick the caller read) up to
-- `latest`, and enqueue `ticks` (with their payloads) in the same statement. Under READ
-- COMMITTED a concurrent caller with the same `expected` waits for the row lock, then
-- finds last_tick moved and takes nothing. A tick's job has run_at = the tick.
-- SECURITY DEFINER: a worker role may enqueue periodic ticks, and nothing else (it has
-- no INSERT on jobs).
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
$$;
REVOKE ALL ON FUNCTION {{schema}}.take_ticks(text, timestamptz, timestamptz, text, text,
    integer, integer, timestamptz[], text[]) FROM PUBLIC;

-- Unique jobs ----------------------------------------------------------------------------

-- One row per idempotency key that enqueue_unique() has seen: the job that took the key
-- last, and how long that job keeps it once done. Every keyed enqueue locks its keys'
-- rows first, so enqueues of one key settle one after the other, and whether the job
-- still holds the key is read from the job itself: it does while pending or running,
-- and while done for less than `unique_for`. Failed and cancelled jobs let go (they did
-- not do the work). Rows go with their jobs (prune.sql), which the pruner keeps while
-- they hold their key. jobs_idempotency_key_idx (live jobs, version 1) stays: it is
-- what a plain INSERT with a key meets.
CREATE TABLE {{schema}}.job_keys (
    key        text PRIMARY KEY,           -- the job's idempotency_key: found by it
    job_id     bigint,
    unique_for interval
);

-- Enqueue jobs of one task, each with an idempotency key or none, in one call; one row
-- per item, in any order: `ord` (1-based) is the item, `outcome` says what happened:
--   inserted   a new job (only id, run_at and created_at are filled: the caller has the rest)
--   duplicate  the key is held: the holder's row, unchanged
--   replaced   on_conflict 'replace' and the holder was pending: its row with the new
--              payload and run_at (a running or done holder is returned as a duplicate)
-- With on_conflict 'raise' a held key raises unique_violation (constraint
-- jobs_idempotency_key_idx) with the holder as JSON in DETAIL, and nothing is enqueued.
-- An item whose key an earlier item of the same call took gets that job.
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
    job_run_at timestamptz, locked_by text, heartbeat_at timestamptz, last_error text,
    result text, created_at timestamptz, finished_at timestamptz, tick timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
#variable_conflict use_column
DECLARE
    n integer := jsonb_array_length(enqueue_unique.payloads);
    run_time timestamptz := coalesce(enqueue_unique.run_at, now());
    keyset text[];                     -- this call's keys, distinct, in order
    fresh text[];                      -- those that had no row: ours until we commit
    held text[];                       -- those a job holds
    free boolean := false;             -- the item's key is known to be free
    settled integer[] := '{}';         -- items inserted by the set-based statements
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

    IF n = 1 THEN
        -- One item (every single enqueue): lock its key, and settle it in the loop below.
        -- A key row we insert is ours until we commit: another enqueue of the key waits
        -- for it in the primary key.
        k := enqueue_unique.keys[1];
        IF k IS NOT NULL THEN
            INSERT INTO {{schema}}.job_keys (key) VALUES (k) ON CONFLICT (key) DO NOTHING;
            free := FOUND;
            IF NOT free THEN
                PERFORM FROM {{schema}}.job_keys r WHERE r.key = k FOR UPDATE;
            END IF;
        END IF;
    ELSE
        -- Lock every key of the call, in key order (calls sharing keys cannot deadlock):
        -- insert the rows of new keys, lock the others.
        keyset := ARRAY(SELECT DISTINCT x FROM unnest(enqueue_unique.keys) AS x
                        WHERE x IS NOT NULL ORDER BY x);
        WITH made AS (
            INSERT INTO {{schema}}.job_keys (key)
            SELECT x FROM unnest(keyset) AS x ORDER BY x
            ON CONFLICT (key) DO NOTHING
            RETURNING key
        )
        SELECT coalesce(array_agg(m.key), '{}') INTO fresh FROM made m;
        PERFORM FROM {{schema}}.job_keys r
        WHERE r.key = ANY (keyset)
          AND NOT EXISTS (SELECT FROM unnest(fresh) AS f(key) WHERE f.key = r.key)
        ORDER BY r.key FOR UPDATE;
        held := ARRAY(
            SELECT r.key FROM {{schema}}.job_keys r JOIN {{schema}}.jobs j ON j.id = r.job_id
            WHERE r.key = ANY (keyset)
              AND (j.status IN ('pending', 'running')
                   OR (j.status = 'done' AND j.finished_at + r.unique_for > now())));

        -- Items without a key, in one statement (identity values drawn in item order).
        IF EXISTS (SELECT FROM unnest(enqueue_unique.keys) AS x WHERE x IS NULL) THEN
            WITH items AS (
                SELECT e.ord::integer AS ord, e.payload
                FROM ROWS FROM (jsonb_array_elements(enqueue_unique.payloads),
                                unnest(enqueue_unique.keys)) WITH ORDINALITY AS e(payload, key, ord)
                WHERE e.key IS NULL
            ), inserted AS (
                INSERT INTO {{schema}}.jobs
                    (task, payload, queue, priority, run_at, max_attempts, enqueued_by)
                SELECT enqueue_unique.task, i.payload, enqueue_unique.queue,
                       enqueue_unique.priority, run_time, enqueue_unique.max_attempts,
                       session_user
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
        END IF;

        -- The first item of each free key, in one statement. ON CONFLICT: a live job that a
        -- plain INSERT gave the key (not in job_keys) holds it too; that item settles below.
        WITH firsts AS (
            SELECT DISTINCT ON (e.key) e.ord::integer AS ord, e.payload, e.key
            FROM ROWS FROM (jsonb_array_elements(enqueue_unique.payloads),
                            unnest(enqueue_unique.keys)) WITH ORDINALITY AS e(payload, key, ord)
            WHERE e.key IS NOT NULL
              AND NOT EXISTS (SELECT FROM unnest(held) AS h(key) WHERE h.key = e.key)
            ORDER BY e.key, e.ord
        ), inserted AS (
            INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts,
                                         idempotency_key, enqueued_by)
            SELECT enqueue_unique.task, f.payload, enqueue_unique.queue, enqueue_unique.priority,
                   run_time, enqueue_unique.max_attempts, f.key, session_user
            FROM firsts f ORDER BY f.key
            ON CONFLICT (idempotency_key)
                WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running')
            DO NOTHING
            RETURNING id, idempotency_key
        ), taken AS (
            UPDATE {{schema}}.job_keys r SET job_id = x.id, unique_for = enqueue_unique.unique_for
            FROM inserted x WHERE r.key = x.idempotency_key
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

        -- With on_conflict 'ignore', every item whose key a job in job_keys holds (from
        -- before this call, or from an earlier item) gets that job: two statements for all.
        IF cardinality(settled) = n THEN
            RETURN;  -- every item was new
        END IF;
        IF enqueue_unique.on_conflict = 'ignore' THEN
            ords := ARRAY(
                SELECT g.ord::integer
                FROM unnest(enqueue_unique.keys) WITH ORDINALITY AS g(key, ord)
                JOIN {{schema}}.job_keys r ON r.key = g.key
                JOIN {{schema}}.jobs j ON j.id = r.job_id
                WHERE NOT EXISTS (SELECT FROM unnest(settled) AS s(ord) WHERE s.ord = g.ord)
                  AND (j.status IN ('pending', 'running')
                       OR (j.status = 'done' AND j.finished_at + r.unique_for > now()))
                  AND (j.enqueued_by = session_user
                       OR has_column_privilege(session_user, '{{schema}}.jobs'::regclass,
                                               'payload', 'SELECT')));
            RETURN QUERY
                SELECT g.ord::integer, 'duplicate'::text, j.id, j.queue, j.task, j.payload::text,
                       j.status::text, j.priority, j.attempts, j.max_attempts, j.run_at,
                       j.locked_by, j.heartbeat_at, j.last_error, j.result::text, j.created_at,
                       j.finished_at,
                       (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id)
                FROM unnest(enqueue_unique.keys) WITH ORDINALITY AS g(key, ord)
                JOIN unnest(ords) AS o(ord) ON o.ord = g.ord
                JOIN {{schema}}.job_keys r ON r.key = g.key  -- locked: names the same job
                JOIN {{schema}}.jobs j ON j.id = r.job_id;
            settled := settled || ords;
        END IF;
    END IF;

    -- Every other item (or the only one): its key may be held, by a job from before this
    -- call or by an earlier item. The items of a key settle in order (the last one
    -- replaces last).
    FOR item, k IN
        SELECT g.ord, g.key FROM unnest(enqueue_unique.keys) WITH ORDINALITY AS g(key, ord)
        WHERE NOT EXISTS (SELECT FROM unnest(settled) AS s(ord) WHERE s.ord = g.ord)
        ORDER BY g.key, g.ord
    LOOP
        tries := 0;
        LOOP
            tries := tries + 1;
            IF tries > 10 THEN  -- the holder keeps changing: let the caller retry
                RAISE EXCEPTION 'idempotency key % changed hands 10 times while enqueuing',
                    quote_literal(k) USING ERRCODE = 'serialization_failure';
            END IF;
            IF NOT free THEN
                SELECT j.* INTO holder
                FROM {{schema}}.job_keys r JOIN {{schema}}.jobs j ON j.id = r.job_id
                WHERE r.key = k
                  AND (j.status IN ('pending', 'running')
                       OR (j.status = 'done' AND j.finished_at + r.unique_for > now()));
                IF NOT FOUND THEN  -- a live job a plain INSERT gave the key
                    SELECT j.* INTO holder FROM {{schema}}.jobs j
                    WHERE j.idempotency_key = k AND j.status IN ('pending', 'running');
                END IF;
                free := NOT FOUND;
            END IF;
            IF free THEN
                free := false;
                new_id := NULL;
                INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at,
                                             max_attempts, idempotency_key, enqueued_by)
                VALUES (enqueue_unique.task, enqueue_unique.payloads -> (item - 1),
                        enqueue_unique.queue, enqueue_unique.priority, run_time,
                        enqueue_unique.max_attempts, k, session_user)
                ON CONFLICT (idempotency_key)
                    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running')
                DO NOTHING
                RETURNING id INTO new_id;
                CONTINUE WHEN new_id IS NULL;
                UPDATE {{schema}}.job_keys r
                SET job_id = new_id, unique_for = enqueue_unique.unique_for WHERE r.key = k;
                RETURN QUERY SELECT item, 'inserted'::text, new_id, NULL::text, NULL::text,
                                    NULL::text, NULL::text, NULL::integer, NULL::integer,
                                    NULL::integer, run_time, NULL::text, NULL::timestamptz,
                                    NULL::text, NULL::text, now(), NULL::timestamptz,
                                    NULL::timestamptz;
                EXIT;
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
                              'finished_at', extract(epoch FROM holder.finished_at))::text,
                          HINT = 'on_conflict ''ignore'' returns the existing job instead';
            END IF;
            result_of := 'duplicate';
            IF enqueue_unique.on_conflict = 'replace' AND holder.status = 'pending' THEN
                UPDATE {{schema}}.jobs j
                SET payload = enqueue_unique.payloads -> (item - 1), run_at = run_time
                WHERE j.id = holder.id AND j.status = 'pending'
                RETURNING * INTO holder;
                CONTINUE WHEN NOT FOUND;  -- claimed or cancelled in between: decide again
                result_of := 'replaced';
            END IF;
            RETURN QUERY SELECT item, result_of, holder.id, holder.queue, holder.task,
                                holder.payload::text, holder.status::text, holder.priority,
                                holder.attempts, holder.max_attempts, holder.run_at,
                                holder.locked_by, holder.heartbeat_at, holder.last_error,
                                holder.result::text, holder.created_at, holder.finished_at,
                                (SELECT t.tick FROM {{schema}}.periodic_ticks t
                                 WHERE t.job_id = holder.id);
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
-- queue, priority and max_attempts default to the task's declaration (version 9), and
-- the same refusals apply (unknown task while the registry is not empty: P0002;
-- arguments that do not fit the declaration: 22023).
--   SELECT aiopgq.enqueue('task.name', '{"a": 1}', idempotency_key => 'order-42');
DROP FUNCTION {{schema}}.enqueue(text, jsonb, text, timestamptz, integer, integer);
CREATE FUNCTION {{schema}}.enqueue(
    task text,
    payload jsonb DEFAULT '{}'::jsonb,
    queue text DEFAULT NULL,
    run_at timestamptz DEFAULT now(),
    priority integer DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    on_conflict text DEFAULT 'ignore'
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    declared {{schema}}.tasks%ROWTYPE;
    known text;
    new_id bigint;
BEGIN
    SELECT * INTO declared FROM {{schema}}.tasks t WHERE t.name = enqueue.task;
    IF NOT FOUND THEN
        SELECT string_agg(t.name, ', ' ORDER BY t.name) INTO known FROM {{schema}}.tasks t;
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'no task named % is registered (known: %)',
                quote_literal(enqueue.task), known
                USING ERRCODE = 'no_data_found',
                      HINT = 'check the name, or start a worker whose queue registers the task';
        END IF;
    ELSIF NOT declared.any_keyword OR NOT coalesce(enqueue.payload, '{}') ?& declared.required THEN
        SELECT string_agg(quote_literal(k), ', ') INTO known
        FROM jsonb_object_keys(coalesce(enqueue.payload, '{}')) AS k
        WHERE NOT declared.any_keyword AND k <> ALL (declared.arguments);
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'task %: unexpected argument(s) %', enqueue.task, known
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('the task takes %s', array_to_string(declared.arguments, ', '));
        END IF;
        SELECT string_agg(quote_literal(r), ', ') INTO known
        FROM unnest(declared.required) AS r
        WHERE NOT coalesce(enqueue.payload, '{}') ? r;
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'task %: missing required argument(s) %', enqueue.task, known
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('the task takes %s', array_to_string(declared.arguments, ', '));
        END IF;
    END IF;
    IF enqueue.idempotency_key IS NULL THEN
        IF enqueue.unique_for IS NOT NULL OR enqueue.on_conflict IS DISTINCT FROM 'ignore' THEN
            RAISE EXCEPTION 'unique_for and on_conflict need an idempotency_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        INSERT INTO {{schema}}.jobs (task, payload, queue, run_at, priority, max_attempts)
        VALUES (enqueue.task, coalesce(enqueue.payload, '{}'::jsonb),
                coalesce(enqueue.queue, declared.queue, 'default'),
                coalesce(enqueue.run_at, now()),
                coalesce(enqueue.priority, declared.priority, 0),
                coalesce(enqueue.max_attempts, declared.max_attempts, 5))
        RETURNING id INTO new_id;
        RETURN new_id;
    END IF;
    SELECT u.id INTO new_id
    FROM {{schema}}.enqueue_unique(
        enqueue.task, jsonb_build_array(coalesce(enqueue.payload, '{}'::jsonb)),
        ARRAY[enqueue.idempotency_key], coalesce(enqueue.queue, declared.queue, 'default'),
        coalesce(enqueue.priority, declared.priority, 0), enqueue.run_at,
        coalesce(enqueue.max_attempts, declared.max_attempts, 5),
        enqueue.unique_for, enqueue.on_conflict) AS u;
    RETURN new_id;
END
$$;

-- Roles (see 0002_roles.sql), a superset of version 9's grants: producers may also
-- enqueue with keys; workers may also register schedules and enqueue their ticks
-- (through take_ticks, not INSERT on jobs).
CREATE OR REPLACE FUNCTION {{schema}}.grant_producer(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT INSERT (task, payload, queue, priority, run_at, max_attempts, '
                   'idempotency_key) ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT (id, run_at, created_at, idempotency_key, status) '
                   'ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version, %I.tasks TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
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
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.tasks TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.schedules TO %I',
                   '{{schema_name}}', role_name);
    -- The pruner deletes the keys and ticks of the jobs it deletes.
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.job_keys, %I.periodic_ticks TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
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
