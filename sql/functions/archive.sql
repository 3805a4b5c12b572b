-- The partitioned layout of finished jobs, and the two functions that keep its
-- partitions.
--
-- Plain layout, the default: finished rows stay in jobs until the maintenance leader
-- deletes them after their status's retention (sql/maintain/prune.sql).
--
-- Partitioned layout, switched on by `aiopgq partition --enable` (or
-- Queue.enable_partitioning()): the maintenance leader moves each finished row out of
-- jobs once it has been finished for `archive_after` seconds, 1,000 rows per short
-- transaction (sql/maintain/archive_move.sql), into jobs_archive, partitioned by status
-- and then by ranges of finished_at `partition_width` seconds wide; retention then drops
-- a status's partition once all of it is older than the retention, instead of deleting
-- its rows one by one.
--
-- What that changes for bloat: a move deletes from jobs exactly as the pruner would, so
-- jobs gets as many dead tuples. But jobs then holds minutes of finished rows instead of
-- days, so each vacuum of it (and of each of its indexes, which a vacuum reads whole) is
-- short and autovacuum keeps up; the archive is written by inserts only, so it has no
-- dead tuples; and retention is a DROP TABLE: no WAL per row, no vacuum, the space goes
-- back to the file system at once. The price: each finished row is written a second
-- time, into the archive.
--
-- jobs, its indexes and every statement of the claim and the completions are the same
-- in both layouts; the archive is read only by operators (get_job, list_jobs, retry,
-- job_status) and by the maintenance leader. The tables are in
-- sql/migrations/baseline_*.sql (archive_layout, jobs_archive, archive_partitions).
--
-- Both functions are SECURITY DEFINER: least-privilege workers (see grant_worker in
-- roles.sql) run them as the schema's owner, who owns the partitions. They take no
-- text from their caller, their dynamic SQL quotes schema and table with %I, and their
-- search_path ends in pg_temp (sql/README.md: definer functions). lock_timeout bounds
-- how long they wait for the archive's readers; on timeout the next maintenance pass
-- tries again.

-- Make the partitions of each finished status up to two widths past the current one;
-- returns how many it made. Each is created apart and then attached: ATTACH takes SHARE
-- UPDATE EXCLUSIVE on the status's table, which readers and the move do not wait for
-- (CREATE ... PARTITION OF would take ACCESS EXCLUSIVE). After a long pause one
-- partition bridges the gap rather than one per missed width. The first partition of a
-- status starts at MINVALUE: it takes the rows that had finished before the layout was
-- switched on.
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

-- Drop the partitions of status `s` that hold only rows finished before `before` (their
-- upper bound is at or before it); returns their names. DROP takes ACCESS EXCLUSIVE on
-- the status's table for an instant: lock_timeout bounds the wait of the archive's
-- readers queued behind it (the claim never reads the archive).
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
