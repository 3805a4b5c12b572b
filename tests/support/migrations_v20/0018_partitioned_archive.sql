-- aiopgq schema, version 18: an optional partitioned layout for finished jobs (off).
--
-- Plain layout, the default, unchanged here: finished rows stay in jobs until the
-- maintenance leader deletes them after their status's retention (sql/prune.sql).
--
-- Partitioned layout, switched on by `aiopgq partition --enable` (or
-- Queue.enable_partitioning()): the maintenance leader moves each finished row out of
-- jobs once it has been finished for `archive_after` seconds, 1,000 rows per short
-- transaction (sql/archive_move.sql), into jobs_archive, partitioned by status and
-- then by ranges of finished_at `partition_width` seconds wide; retention then drops a
-- status's partition once all of it is older than the retention, instead of deleting
-- its rows one by one.
--
-- What that changes for bloat: a move deletes from jobs exactly as the pruner would,
-- so jobs gets as many dead tuples as before. But jobs now holds minutes of finished
-- rows instead of days, so each vacuum of it (and of each of its indexes, which a
-- vacuum reads whole) is short and autovacuum keeps up; the archive is written by
-- inserts only, so it has no dead tuples; and retention is a DROP TABLE: no WAL per
-- row, no vacuum, the space goes back to the file system at once. The price: each
-- finished row is written a second time, into the archive.
--
-- jobs, its indexes and every statement of the claim and the completions are the same
-- in both layouts; the archive is read only by operators (get_job, list_jobs, retry,
-- job_status) and by the maintenance leader.

-- The layout switch and its settings: one row.
CREATE TABLE {{schema}}.archive_layout (
    only_row        boolean PRIMARY KEY DEFAULT true CONSTRAINT archive_layout_one_row
                        CHECK (only_row),
    enabled         boolean NOT NULL DEFAULT false,
    -- Seconds a finished row stays in jobs: at least a minute, since queue_stats (the
    -- dashboard's rates) reads the recently finished rows in jobs.
    archive_after   double precision NOT NULL DEFAULT 300
                        CONSTRAINT archive_layout_archive_after CHECK (archive_after >= 60),
    partition_width integer NOT NULL DEFAULT 86400
                        CONSTRAINT archive_layout_partition_width CHECK (partition_width >= 60),
    changed_at      timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {{schema}}.archive_layout DEFAULT VALUES;

-- Every column of jobs, in the same order (the move inserts `SELECT *` of the deleted
-- rows; tests/test_archive.py checks the two stay alike). A migration that adds a
-- column to jobs adds it here too.
CREATE TABLE {{schema}}.jobs_archive (LIKE {{schema}}.jobs) PARTITION BY LIST (status);
CREATE TABLE {{schema}}.jobs_archive_done PARTITION OF {{schema}}.jobs_archive
    FOR VALUES IN ('done') PARTITION BY RANGE (finished_at);
CREATE TABLE {{schema}}.jobs_archive_failed PARTITION OF {{schema}}.jobs_archive
    FOR VALUES IN ('failed') PARTITION BY RANGE (finished_at);
CREATE TABLE {{schema}}.jobs_archive_cancelled PARTITION OF {{schema}}.jobs_archive
    FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);
-- get_job and retry look archived jobs up by id (one probe per partition).
CREATE INDEX jobs_archive_id_idx ON {{schema}}.jobs_archive (id);

-- The partitions made so far: [from_at, to_at) of finished_at, per status. The first
-- of a status starts at -infinity (MINVALUE): it takes the rows that had finished
-- before the layout was switched on.
CREATE TABLE {{schema}}.archive_partitions (
    status  {{schema}}.job_status NOT NULL,
    from_at timestamptz NOT NULL,
    to_at   timestamptz NOT NULL,
    name    text NOT NULL UNIQUE,
    PRIMARY KEY (status, from_at)
);

-- Make the partitions of each finished status up to two widths past the current one.
-- Each is created apart and then attached: ATTACH takes SHARE UPDATE EXCLUSIVE on the
-- status's table, which readers and the move do not wait for (CREATE ... PARTITION OF
-- would take ACCESS EXCLUSIVE). After a long pause one partition bridges the gap
-- rather than one per missed width. SECURITY DEFINER: least-privilege workers (see
-- grant_worker) run it as the schema's owner; it takes no text from its caller.
CREATE FUNCTION {{schema}}.archive_extend() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog SET lock_timeout = '1s' AS $$
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
$$;
REVOKE ALL ON FUNCTION {{schema}}.archive_extend() FROM PUBLIC;

-- Drop the partitions of status `s` that hold only rows finished before `before` (their
-- upper bound is at or before it); returns their names. DROP takes ACCESS EXCLUSIVE
-- on the status's table for an instant: lock_timeout bounds the wait of the archive's
-- readers queued behind it (the claim never reads the archive); on timeout the next
-- maintenance pass tries again.
CREATE FUNCTION {{schema}}.archive_drop(s {{schema}}.job_status, before timestamptz)
RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog SET lock_timeout = '1s' AS $$
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
$$;
REVOKE ALL ON FUNCTION {{schema}}.archive_drop({{schema}}.job_status, timestamptz) FROM PUBLIC;

-- A producer's view of its own jobs reads the archive too (same signature and grants).
CREATE OR REPLACE FUNCTION {{schema}}.job_status(job_id bigint)
RETURNS TABLE (id bigint, status text, attempts integer, last_error text, result jsonb,
               run_at timestamptz, finished_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
    (SELECT j.id, j.status::text, j.attempts, j.last_error, j.result, j.run_at, j.finished_at
     FROM {{schema}}.jobs j
     WHERE j.id = job_status.job_id AND j.enqueued_by = session_user)
    UNION ALL
    (SELECT a.id, a.status::text, a.attempts, a.last_error, a.result, a.run_at, a.finished_at
     FROM {{schema}}.jobs_archive a
     WHERE a.id = job_status.job_id AND a.enqueued_by = session_user)
    LIMIT 1;
$$;

-- Workers move rows into the archive and run the two functions above. grant_worker
-- grows by wrapping the version before this one, so that other migrations can do the
-- same in any order; roles granted before this migration get the new privileges here.
ALTER FUNCTION {{schema}}.grant_worker(name) RENAME TO grant_worker_before_18;

CREATE FUNCTION {{schema}}.grant_worker(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {{schema}}.grant_worker_before_18(role_name);
    EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.jobs_archive TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.archive_layout, %I.archive_partitions TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.archive_extend(), '
                   '%I.archive_drop(%I.job_status, timestamptz) TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.grant_worker(name) FROM PUBLIC;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS role
        FROM pg_class AS t, aclexplode(t.relacl) AS a
        WHERE t.oid = '{{schema}}.jobs'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee <> 0 AND a.grantee <> t.relowner
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.jobs_archive TO %s',
                       '{{schema_name}}', r.role);
        EXECUTE format('GRANT SELECT ON %I.archive_layout, %I.archive_partitions TO %s',
                       '{{schema_name}}', '{{schema_name}}', r.role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.archive_extend(), '
                       '%I.archive_drop(%I.job_status, timestamptz) TO %s',
                       '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', r.role);
    END LOOP;
END
$$;
