-- aiopgq schema, version 20, from version 19: producers that see only their own jobs'
-- keys and statuses, and a payload size limit enforced by the database. (The functions
-- of version 20 are in sql/functions/.)

-- Producers: grant_producer no longer grants SELECT on (idempotency_key, status) of jobs.
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
-- Raise it with set_max_payload_bytes() (sql/functions/payload_limit.sql) when you raise
-- max_payload_bytes.
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
