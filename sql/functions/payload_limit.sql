CREATE OR REPLACE FUNCTION {{schema}}.max_payload_bytes()
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    SELECT (regexp_match(pg_catalog.pg_get_constraintdef(c.oid), '<= (\d+)'))[1]::bigint
    FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = '{{schema}}.jobs'::regclass AND c.conname = 'jobs_payload_max_bytes';
$function$;

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
$function$;

REVOKE ALL ON FUNCTION {{schema}}.set_max_payload_bytes(max_bytes bigint) FROM PUBLIC;
