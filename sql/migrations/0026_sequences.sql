-- Sequences (sequence_key=): jobs of one key run one at a time, in enqueue order; one
-- that ends failed holds the rest until it is retried or cancelled
-- (sql/functions/sequences.sql says how).
--
-- A key's newest job: the enqueue locks this row to find the job a new one waits on, so
-- enqueues of one key are ordered by it. One small row per key; prune deletes it with
-- the job it names.
CREATE TABLE {{schema}}.sequences (
    key text NOT NULL,
    last_job_id bigint NOT NULL,
    CONSTRAINT sequences_pkey PRIMARY KEY (key)
);
CREATE INDEX sequences_last_job_idx ON {{schema}}.sequences USING btree (last_job_id);

-- An edge's kind: 'parent' (depends_on: a failed or cancelled parent cancels the child,
-- or not with on_parent_failure "run"), 'sequence' (the job before it in its sequence: a
-- failed one holds the child, a cancelled one lets it go on past it) or 'both'.
ALTER TABLE {{schema}}.job_dependencies
    ADD COLUMN kind text NOT NULL DEFAULT 'parent',
    ADD CONSTRAINT job_dependencies_kind_check CHECK (kind IN ('parent', 'sequence', 'both'));

-- enqueue() takes sequence_key: a new signature. The old one goes; the roles that could
-- run it keep that right on the new one (a stub here, whose body
-- sql/functions/enqueue.sql then writes: CREATE OR REPLACE keeps grants).
CREATE FUNCTION {{schema}}.enqueue(task text, payload jsonb DEFAULT '{}'::jsonb,
    queue text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT now(),
    priority integer DEFAULT NULL::integer, max_attempts integer DEFAULT NULL::integer,
    idempotency_key text DEFAULT NULL::text, unique_for interval DEFAULT NULL::interval,
    on_conflict text DEFAULT 'ignore'::text, concurrency_key text DEFAULT NULL::text,
    depends_on bigint[] DEFAULT NULL::bigint[], on_parent_failure text DEFAULT 'cancel'::text,
    sequence_key text DEFAULT NULL::text)
 RETURNS bigint LANGUAGE sql AS 'SELECT NULL::bigint';
-- add_to_sequence() (a stub here too): the roles that may give parents may sequence.
CREATE FUNCTION {{schema}}.add_to_sequence(children bigint[], sequence_key text)
 RETURNS TABLE(id bigint, status text) LANGUAGE sql AS 'SELECT NULL::bigint, NULL::text';
REVOKE ALL ON FUNCTION {{schema}}.add_to_sequence(bigint[], text) FROM PUBLIC;
DO $do$
DECLARE
    grantee name;
BEGIN
    FOR grantee IN
        SELECT r.rolname
        FROM pg_proc p, aclexplode(p.proacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE p.oid = to_regprocedure('{{schema}}.enqueue(text, jsonb, text, timestamptz, '
                                      'integer, integer, text, interval, text, text, '
                                      'bigint[], text)')
          AND a.privilege_type = 'EXECUTE' AND r.rolname <> current_user
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.enqueue(text, jsonb, text, '
                       'timestamptz, integer, integer, text, interval, text, text, bigint[], '
                       'text, text) TO %I', grantee);
    END LOOP;
    FOR grantee IN
        SELECT r.rolname
        FROM pg_proc p, aclexplode(p.proacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE p.oid = to_regprocedure('{{schema}}.add_dependencies(bigint[], bigint[], text)')
          AND a.privilege_type = 'EXECUTE' AND r.rolname <> current_user
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.add_to_sequence(bigint[], text) '
                       'TO %I', grantee);
    END LOOP;
END
$do$;
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, jsonb, text, timestamptz, integer, integer, text,
    interval, text, text, bigint[], text);

-- Workers (the roles that may update jobs) prune the key rows with the jobs they name.
DO $do$
DECLARE
    grantee name;
BEGIN
    FOR grantee IN
        SELECT DISTINCT r.rolname
        FROM pg_class c
        CROSS JOIN LATERAL aclexplode(c.relacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE c.oid = '{{schema}}.jobs'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT, DELETE ON {{schema}}.sequences TO %I', grantee);
    END LOOP;
END
$do$;
