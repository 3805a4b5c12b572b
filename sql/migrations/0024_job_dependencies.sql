-- Job dependencies (depends_on=): a job with parents waits in its own status until
-- every parent is done (sql/functions/dependencies.sql says how it is released).
-- ADD VALUE inside migrate()'s transaction: the new label cannot be used before the
-- commit, so nothing in this file or in a LANGUAGE sql function names it (the
-- statements and the PL/pgSQL functions that do run after the commit).
ALTER TYPE {{schema}}.job_status ADD VALUE IF NOT EXISTS 'waiting';

CREATE TABLE {{schema}}.job_dependencies (
    child_id bigint NOT NULL,
    parent_id bigint NOT NULL,
    outcome {{schema}}.job_status,
    result jsonb,
    CONSTRAINT job_dependencies_pkey PRIMARY KEY (child_id, parent_id)
);
CREATE INDEX job_dependencies_parent_idx ON {{schema}}.job_dependencies USING btree (parent_id);
CREATE INDEX job_dependencies_open_idx ON {{schema}}.job_dependencies USING btree (child_id)
    WHERE (outcome IS NULL);

-- enqueue() takes depends_on and on_parent_failure: a new signature. The old one goes
-- (a schema upgraded from before 21 has none yet: functions/ writes it after this);
-- the roles that could run it keep that right on the new one (a stub here, whose body
-- sql/functions/enqueue.sql then writes: CREATE OR REPLACE keeps grants).
CREATE FUNCTION {{schema}}.enqueue(task text, payload jsonb DEFAULT '{}'::jsonb,
    queue text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT now(),
    priority integer DEFAULT NULL::integer, max_attempts integer DEFAULT NULL::integer,
    idempotency_key text DEFAULT NULL::text, unique_for interval DEFAULT NULL::interval,
    on_conflict text DEFAULT 'ignore'::text, concurrency_key text DEFAULT NULL::text,
    depends_on bigint[] DEFAULT NULL::bigint[], on_parent_failure text DEFAULT 'cancel'::text)
 RETURNS bigint LANGUAGE sql AS 'SELECT NULL::bigint';
DO $do$
DECLARE
    grantee name;
BEGIN
    FOR grantee IN
        SELECT r.rolname
        FROM pg_proc p, aclexplode(p.proacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE p.oid = to_regprocedure('{{schema}}.enqueue(text, jsonb, text, timestamptz, '
                                      'integer, integer, text, interval, text, text)')
          AND a.privilege_type = 'EXECUTE' AND r.rolname <> current_user
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.enqueue(text, jsonb, text, '
                       'timestamptz, integer, integer, text, interval, text, text, bigint[], '
                       'text) TO %I', grantee);
    END LOOP;
END
$do$;
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, jsonb, text, timestamptz, integer, integer, text,
    interval, text, text);

-- Roles granted before this version get what grant_producer and grant_worker now grant
-- for dependencies: workers (the roles that may update jobs) the edges, producers (those
-- that may insert its task column) and workers add_dependencies(), a stub here whose
-- body sql/functions/dependencies.sql writes (CREATE OR REPLACE keeps grants).
CREATE FUNCTION {{schema}}.add_dependencies(children bigint[], parents bigint[],
    on_parent_failure text DEFAULT 'cancel'::text)
 RETURNS TABLE(id bigint, status text) LANGUAGE sql AS 'SELECT NULL::bigint, NULL::text';
REVOKE ALL ON FUNCTION {{schema}}.add_dependencies(bigint[], bigint[], text) FROM PUBLIC;
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.job_dependencies '
                       'TO %I', grantee);
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.add_dependencies(bigint[], '
                       'bigint[], text) TO %I', grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT r.rolname
        FROM pg_attribute att
        CROSS JOIN LATERAL aclexplode(att.attacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE att.attrelid = '{{schema}}.jobs'::regclass AND att.attname = 'task'
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.add_dependencies(bigint[], '
                       'bigint[], text) TO %I', grantee);
    END LOOP;
END
$do$;
