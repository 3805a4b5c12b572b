-- aiopgq schema, version 20: definer functions that a temporary schema cannot hijack,
-- producers that see only their own jobs' keys and statuses, and a payload size limit
-- enforced by the database.

-- SECURITY DEFINER functions ------------------------------------------------------------
--
-- A function run as its owner resolves the names in its body with its own search_path.
-- `SET search_path = pg_catalog` alone is not enough: when pg_temp is not named,
-- PostgreSQL searches the session's temporary schema FIRST for relations and types, and
-- any role that may create temporary tables (PUBLIC may, by default) owns that schema. A
-- caller's `CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (pg_temp.evil(VALUE))`
-- then turns every `::text` in the body into a call of evil() as the owner.
--
-- With pg_temp named last, relations and types resolve in pg_catalog before pg_temp, so
-- a built-in name (text, jsonb, integer, ...) cannot be shadowed; and PostgreSQL never
-- searches pg_temp for functions or operators at all (pg_temp is only ever used for them
-- when a call names it explicitly), so `=`, `||`, now() or unnest() in the bodies stay
-- pg_catalog's. Every other object the bodies use is qualified with the schema
-- ({{schema}}.jobs, {{schema}}.job_status, ...), and the dynamic SQL of archive_extend
-- and archive_drop quotes schema and table with %I. So for the definer functions' own
-- bodies the setting is all that is needed (no body names an unqualified type or
-- relation that pg_catalog lacks), and they stay as they are; what they call is below.
-- tests/security/test_definer_functions.py fails on any definer function in the schema
-- whose search_path does not end in pg_temp.
ALTER FUNCTION {{schema}}.job_status(bigint) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.enqueue_unique(text, jsonb, text[], text, integer, timestamptz,
    integer, interval, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.take_ticks(text, timestamptz, timestamptz, text, text, integer,
    integer, timestamptz[], text[]) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.archive_extend() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.archive_drop({{schema}}.job_status, timestamptz)
    SET search_path = pg_catalog, pg_temp;

-- One more way in: PL/pgSQL compiles a function once per session, resolving the types
-- of its DECLARE section with the search_path of that first call, and keeps them. The
-- wake-up trigger (wake_on_insert) runs as its caller, and also inside enqueue_unique()
-- and take_ticks(), as the owner. A producer that first fires it with its own
-- search_path (a plain enqueue: pg_temp comes first for types) had `remembered text`
-- compiled as its pg_temp.text, whose CHECK then ran as the owner in its next keyed
-- enqueue. Its statements are re-planned under the definer's search_path (the plan
-- cache checks it); only the declarations stay. So they name pg_catalog.text: the bodies
-- are version 8's otherwise. wake_once never runs inside a definer function; it gets the
-- same declaration, so that a future one calling it is safe too.
CREATE OR REPLACE FUNCTION {{schema}}.wake_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    remembered pg_catalog.text;
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
$$;

-- Producers: only their own jobs' keys and statuses ------------------------------------
--
-- grant_producer gave SELECT on (id, run_at, created_at, idempotency_key, status) of
-- jobs. id, run_at and created_at are what the enqueue statements return (RETURNING
-- needs SELECT on the columns it returns: sql/insert_job*.sql, insert_jobs*.sql, the
-- enqueue() function). idempotency_key and status were for a keyed INSERT's ON CONFLICT
-- arbiter (the unique index jobs_idempotency_key_idx and its predicate on status);
-- keyed enqueues now all go through enqueue_unique(), a definer function that returns
-- the holder of a key only to the role that enqueued it, and a producer reads its own
-- jobs' statuses through job_status(). A plain INSERT with a key still meets the unique
-- index, which needs no SELECT (and without it the error's DETAIL does not show the key).
ALTER FUNCTION {{schema}}.grant_producer(name) RENAME TO grant_producer_before_20;

CREATE FUNCTION {{schema}}.grant_producer(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {{schema}}.grant_producer_before_20(role_name);
    EXECUTE format('REVOKE SELECT (idempotency_key, status) ON %I.jobs FROM %I',
                   '{{schema_name}}', role_name);
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.grant_producer(name) FROM PUBLIC;

-- Roles granted before: column-level SELECT on idempotency_key is only ever granted by
-- grant_producer (workers and readers get SELECT on the whole table, which a column
-- REVOKE does not touch).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS role
        FROM pg_attribute AS t, aclexplode(t.attacl) AS a
        WHERE t.attrelid = '{{schema}}.jobs'::regclass AND t.attname = 'idempotency_key'
          AND a.privilege_type = 'SELECT' AND a.grantee <> 0
    LOOP
        EXECUTE format('REVOKE SELECT (idempotency_key, status) ON %I.jobs FROM %s',
                       '{{schema_name}}', r.role);
    END LOOP;
END
$$;

-- Payload size -------------------------------------------------------------------------
--
-- Queue(max_payload_bytes=...) checks payloads in Python; this limit holds for every
-- path into jobs (a plain INSERT or COPY by a producer, enqueue(), enqueue_unique(),
-- take_ticks()). It counts the payload's jsonb size, uncompressed: pg_column_size() of
-- a new value is its plain size, which costs nothing to read; a value copied from a
-- table may arrive compressed (a producer's own temporary table, say), and is then
-- measured decompressed (`|| '{}'` detoasts it and returns it unchanged).
--
-- The default, 8 MiB, never refuses what Python's default (1,000,000 characters of
-- JSON text) accepts: jsonb takes at most about 6 bytes per character of JSON text
-- (the worst case, an array of one-digit numbers, stores "0," in 12 bytes: a 4-byte
-- entry and an 8-byte-aligned numeric; a 4-byte UTF-8 character is 4 bytes in both).
-- Raise it with set_max_payload_bytes() below when you raise max_payload_bytes.
--
-- Only new jobs are checked (attempts = 0 and pending: a producer can write no other
-- column), so claims, heartbeats, completions and retries of a job never re-measure its
-- payload, and a job over a limit lowered later still runs. NOT VALID: existing rows
-- are not scanned.
ALTER TABLE {{schema}}.jobs ADD CONSTRAINT jobs_payload_max_bytes CHECK (
    attempts > 0 OR status <> 'pending'
    OR CASE WHEN pg_column_compression(payload) IS NULL THEN pg_column_size(payload)
            ELSE pg_column_size(payload || '{}'::jsonb) END <= 8388608
) NOT VALID;
COMMENT ON CONSTRAINT jobs_payload_max_bytes ON {{schema}}.jobs IS
    'payload size limit of new jobs; see max_payload_bytes() and set_max_payload_bytes(n)';

-- The limit in force, in bytes.
--   SELECT aiopgq.max_payload_bytes();
CREATE FUNCTION {{schema}}.max_payload_bytes() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT (regexp_match(pg_catalog.pg_get_constraintdef(c.oid), '<= (\d+)'))[1]::bigint
    FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = '{{schema}}.jobs'::regclass AND c.conname = 'jobs_payload_max_bytes';
$$;

-- Change the limit (as the owner of the schema's tables): new jobs only, at once.
--   SELECT aiopgq.set_max_payload_bytes(16 * 1024 * 1024);
CREATE FUNCTION {{schema}}.set_max_payload_bytes(max_bytes bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF max_bytes IS NULL OR max_bytes < 1024 THEN
        RAISE EXCEPTION 'max_payload_bytes must be at least 1024, not %',
            coalesce(max_bytes::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format(
        'ALTER TABLE %I.jobs DROP CONSTRAINT IF EXISTS jobs_payload_max_bytes, '
        'ADD CONSTRAINT jobs_payload_max_bytes CHECK ('
        'attempts > 0 OR status <> %L OR CASE WHEN pg_column_compression(payload) IS NULL '
        'THEN pg_column_size(payload) ELSE pg_column_size(payload || %L::jsonb) END <= %s'
        ') NOT VALID', '{{schema_name}}', 'pending', '{}', max_bytes);
    EXECUTE format('COMMENT ON CONSTRAINT jobs_payload_max_bytes ON %I.jobs IS %L',
                   '{{schema_name}}', 'payload size limit of new jobs; see max_payload_bytes() '
                   'and set_max_payload_bytes(n)');
    RETURN max_bytes;
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.set_max_payload_bytes(bigint) FROM PUBLIC;
