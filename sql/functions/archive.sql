CREATE OR REPLACE FUNCTION {{schema}}.archive_extend()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET lock_timeout TO '1s'
AS $function$
DECLARE
    width interval;
    slot timestamptz;
    upto timestamptz;
    s {{schema}}.job_status;
    last_end timestamptz;
    next_end timestamptz;
    part text;
    made integer := 0;
BEGIN
    SELECT make_interval(secs => l.partition_width) INTO width FROM {{schema}}.archive_layout l;
    slot := to_timestamp(floor(extract(epoch FROM now()) / extract(epoch FROM width))
                         * extract(epoch FROM width));
    upto := slot + 3 * width;
    FOREACH s IN ARRAY ARRAY['done', 'failed', 'cancelled']::{{schema}}.job_status[] LOOP
        SELECT max(p.to_at) INTO last_end FROM {{schema}}.archive_partitions p WHERE p.status = s;
        WHILE last_end IS NULL OR last_end < upto LOOP
            IF last_end IS NULL THEN
                part := format('jobs_archive_%s_start', s);
                next_end := slot;
            ELSE
                part := format('jobs_archive_%s_%s', s,
                               to_char(last_end AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS'));
                next_end := greatest(last_end + width, slot);
                next_end := slot + ceil(extract(epoch FROM next_end - slot)
                                        / extract(epoch FROM width)) * width;
            END IF;
            EXECUTE format('CREATE TABLE %I.%I (LIKE %I.jobs_archive)',
                           '{{schema_name}}', part, '{{schema_name}}');
            EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s) TO (%L)',
                           '{{schema_name}}', 'jobs_archive_' || s, '{{schema_name}}', part,
                           CASE WHEN last_end IS NULL THEN 'MINVALUE'
                                ELSE quote_literal(last_end) END,
                           next_end);
            INSERT INTO {{schema}}.archive_partitions (status, from_at, to_at, name)
            VALUES (s, coalesce(last_end, '-infinity'), next_end, part);
            last_end := next_end;
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END
$function$;

REVOKE ALL ON FUNCTION {{schema}}.archive_extend() FROM PUBLIC;

CREATE OR REPLACE FUNCTION {{schema}}.archive_drop(s {{schema}}.job_status, before timestamp with time zone)
 RETURNS text[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET lock_timeout TO '1s'
AS $function$
DECLARE
    p record;
    dropped text[] := '{}';
BEGIN
    FOR p IN
        SELECT a.name FROM {{schema}}.archive_partitions a
        WHERE a.status = s AND a.to_at <= before
        ORDER BY a.from_at
    LOOP
        EXECUTE format('DROP TABLE %I.%I', '{{schema_name}}', p.name);
        DELETE FROM {{schema}}.archive_partitions a WHERE a.name = p.name;
        dropped := dropped || p.name;
    END LOOP;
    RETURN dropped;
END
$function$;

REVOKE ALL ON FUNCTION {{schema}}.archive_drop(s {{schema}}.job_status, before timestamp with time zone) FROM PUBLIC;
