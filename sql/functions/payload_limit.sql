-- The payload size limit of new jobs, in bytes of jsonb (uncompressed): every path into
-- jobs (a plain INSERT or COPY by a producer, enqueue(), enqueue_unique(), take_ticks())
-- meets it in the insert trigger (wake.sql), which refuses a larger payload with
-- check_violation, constraint name jobs_payload_max_bytes (Python: PayloadTooLarge).
-- In the trigger, not a CHECK constraint: a CHECK's expression is prepared for every
-- statement that writes jobs, claims and completions included, while the trigger runs
-- for inserts only, once per row.
-- Queue(max_payload_bytes=...) checks payloads in Python before they get there. Only new
-- jobs are measured (attempts = 0: a producer can write no other value), so retries
-- never re-measure a payload, and a job over a limit lowered later still runs. The size
-- is pg_column_size(), which costs nothing to read for a new value (its plain size); a
-- value copied from a table may arrive compressed (a producer's own temporary table,
-- say), and is then measured decompressed.
--
-- The default, 8 MiB, never refuses what Python's default (1,000,000 characters of JSON
-- text) accepts: jsonb takes at most about 6 bytes per character of JSON text (the worst
-- case, an array of one-digit numbers, stores "0," in 12 bytes: a 4-byte entry and an
-- 8-byte-aligned numeric; a 4-byte UTF-8 character is 4 bytes in both). The value lives
-- in payload_limit(), an IMMUTABLE SQL function the trigger's plan inlines as a
-- constant; set_max_payload_bytes() rewrites it, which invalidates those plans.

-- The limit in force, in bytes.
--   SELECT aiopgq.max_payload_bytes();
CREATE OR REPLACE FUNCTION {{schema}}.max_payload_bytes()
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    SELECT {{schema}}.payload_limit();
$function$;

-- Change the limit (as the owner of the schema): new jobs only, at once. Jobs already in
-- the table, larger or not, run as before.
--   SELECT aiopgq.set_max_payload_bytes(16 * 1024 * 1024);
CREATE OR REPLACE FUNCTION {{schema}}.set_max_payload_bytes(max_bytes bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF max_bytes IS NULL OR max_bytes < 1024 THEN
        RAISE EXCEPTION 'max_payload_bytes must be at least 1024, not %',
            coalesce(max_bytes::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION %I.payload_limit() RETURNS bigint LANGUAGE sql '
        'IMMUTABLE PARALLEL SAFE AS %L', '{{schema_name}}',
        format('SELECT %s::bigint', max_bytes));
    RETURN max_bytes;
END
$function$;

REVOKE ALL ON FUNCTION {{schema}}.set_max_payload_bytes(max_bytes bigint) FROM PUBLIC;
