-- Enqueue jobs of one task, each with an idempotency key or none, in one call; one row
-- per item, in any order: `ord` (1-based) is the item, `outcome` says what happened:
--   inserted   a new job (only id, run_at and created_at are filled: the caller has
--              the rest)
--   duplicate  the key is held: the holder's row, unchanged
--   replaced   on_conflict 'replace' and the holder was pending: its row with the new
--              payload and run_at (a running or done holder is returned as a duplicate)
-- With on_conflict 'raise' a held key raises unique_violation (constraint
-- jobs_idempotency_key_idx) with the holder as JSON in DETAIL, and nothing is enqueued.
-- An item whose key an earlier item of the same call took gets that job.
-- `payloads` is a JSON array of payload objects, `keys` one key per payload (NULL:
-- none), `run_at` NULL means now.
--
-- How a key is held: every keyed enqueue locks its keys' rows in job_keys first (in key
-- order: calls sharing keys cannot deadlock; a row it inserts is its own until it
-- commits), so enqueues of one key settle one after the other, and whether the job still
-- holds the key is read from the job itself (job_keys, sql/migrations/baseline_*.sql). A
-- live job that a plain INSERT gave the key (no job_keys row) holds it too: the unique
-- index jobs_idempotency_key_idx. When the holder keeps changing, it raises
-- serialization_failure after 10 tries: the caller retries.
--
-- SECURITY DEFINER so that a producer role (INSERT on some columns, no SELECT) can have
-- the holder back; it gets it only if it enqueued it (enqueued_by, as job_status()) or
-- may read jobs' payloads (may update them, to replace); otherwise a held key raises
-- insufficient_privilege. Its search_path ends in pg_temp (sql/README.md: definer
-- functions).
CREATE OR REPLACE FUNCTION {{schema}}.enqueue_unique(task text, payloads jsonb, keys text[], queue text DEFAULT 'default'::text, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT 5, unique_for interval DEFAULT NULL::interval, on_conflict text DEFAULT 'ignore'::text)
 RETURNS TABLE(ord integer, outcome text, id bigint, job_queue text, job_task text, payload text, status text, job_priority integer, attempts integer, job_max_attempts integer, job_run_at timestamp with time zone, locked_by text, heartbeat_at timestamp with time zone, last_error text, result text, created_at timestamp with time zone, finished_at timestamp with time zone, tick timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

REVOKE ALL ON FUNCTION {{schema}}.enqueue_unique(task text, payloads jsonb, keys text[], queue text, priority integer, run_at timestamp with time zone, max_attempts integer, unique_for interval, on_conflict text) FROM PUBLIC;
