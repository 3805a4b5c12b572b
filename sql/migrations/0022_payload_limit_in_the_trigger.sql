-- The payload size limit moves from a CHECK constraint into the insert trigger
-- (sql/functions/wake.sql). A CHECK constraint's expression is prepared for every
-- statement that writes jobs, claims and completions included: measured with callgrind,
-- about 78,000 server instructions per statement (+36% for a single enqueue, +1.6% per
-- drained job). The trigger runs for inserts only, once per row, with the limit a
-- constant of the plan (payload_limit(), an inlined SQL function): +4% per single
-- enqueue, +2% per bulk row, nothing for claims and completions.
--
-- The limit is data, not code: it lives in payload_limit(), which set_max_payload_bytes()
-- rewrites (sql/functions/payload_limit.sql). A limit an owner set on the constraint
-- carries over.
DO $$
DECLARE
    kept bigint;
BEGIN
    SELECT (regexp_match(pg_catalog.pg_get_constraintdef(c.oid), '<= (\d+)'))[1]::bigint
    INTO kept
    FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = '{{schema}}.jobs'::regclass AND c.conname = 'jobs_payload_max_bytes';
    EXECUTE format(
        'CREATE FUNCTION %I.payload_limit() RETURNS bigint LANGUAGE sql IMMUTABLE '
        'PARALLEL SAFE AS %L', '{{schema_name}}',
        format('SELECT %s::bigint', coalesce(kept, 8388608)));
END
$$;
ALTER TABLE {{schema}}.jobs DROP CONSTRAINT IF EXISTS jobs_payload_max_bytes;
