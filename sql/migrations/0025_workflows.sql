-- Workflows (queue.workflow(...)): a graph of jobs enqueued in one transaction, its
-- groups (add_many: one parent for their dependents) and which job is which node.
-- sql/functions/workflows.sql says how groups are settled and why no count is lost.

CREATE TABLE {{schema}}.workflows (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    created_at timestamp with time zone NOT NULL DEFAULT now(),
    -- set by cancel_workflow(): the workflow then reads `cancelled` once it has ended
    cancelled_at timestamp with time zone,
    CONSTRAINT workflows_pkey PRIMARY KEY (id)
);
CREATE INDEX workflows_created_idx ON {{schema}}.workflows USING btree (created_at DESC, id DESC);

-- A group of add_many: `remaining` members not done, `failed` members that ended failed
-- or cancelled, kept by the statements that end its members (settle_groups()). Its
-- dependents have an edge in job_dependencies whose parent_id is the group's id negated
-- (job ids are positive), settled as a job's when the group is done or failed.
CREATE TABLE {{schema}}.workflow_groups (
    id bigint GENERATED ALWAYS AS IDENTITY,
    workflow_id bigint NOT NULL,
    name text NOT NULL,
    size integer NOT NULL,
    remaining integer NOT NULL,
    failed integer NOT NULL DEFAULT 0,
    CONSTRAINT workflow_groups_pkey PRIMARY KEY (id),
    CONSTRAINT workflow_groups_counts CHECK (remaining >= 0 AND failed >= 0)
);
CREATE INDEX workflow_groups_workflow_idx ON {{schema}}.workflow_groups USING btree (workflow_id);

-- One row per job of a workflow: its node (position in a topological order), group,
-- parents as enqueued (job ids; groups in parent_groups), and for a group member its
-- last outcome and result (what its group counted: a repeat changes nothing). Kept when
-- the job is archived or pruned.
CREATE TABLE {{schema}}.workflow_jobs (
    job_id bigint NOT NULL,
    workflow_id bigint NOT NULL,
    node integer NOT NULL,
    group_id bigint,
    parents bigint[] NOT NULL DEFAULT '{}',
    parent_groups bigint[] NOT NULL DEFAULT '{}',
    outcome {{schema}}.job_status,
    result jsonb,
    CONSTRAINT workflow_jobs_pkey PRIMARY KEY (job_id)
) WITH (fillfactor = 70);  -- room on its page for the member's outcome (a HOT update)
CREATE INDEX workflow_jobs_workflow_idx ON {{schema}}.workflow_jobs USING btree (workflow_id, node);
CREATE INDEX workflow_jobs_group_idx ON {{schema}}.workflow_jobs USING btree (group_id)
    WHERE group_id IS NOT NULL;
-- A row per transaction that changed members' outcomes, inserted by its first change and
-- deleted at its commit: its insert fires the deferred trigger that counts them
-- (sql/functions/workflows.sql), once per transaction.
CREATE TABLE {{schema}}.workflow_count_marks (
    txid bigint NOT NULL
);

-- Roles granted before this version get what grant_producer and grant_worker now grant
-- for workflows: workers (the roles that may update jobs) the tables, producers (those
-- that may insert its task column) and workers create_workflow(), a stub here whose body
-- sql/functions/workflows.sql writes (CREATE OR REPLACE keeps grants).
CREATE FUNCTION {{schema}}.create_workflow(name text, jobs bigint[], nodes integer[],
    groups integer[], policies text[], group_names text[], edge_children bigint[],
    edge_parents bigint[])
 RETURNS bigint LANGUAGE sql AS 'SELECT NULL::bigint';
REVOKE ALL ON FUNCTION {{schema}}.create_workflow(text, bigint[], integer[], integer[], text[],
    text[], bigint[], bigint[]) FROM PUBLIC;
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.workflows, '
                       '{{schema}}.workflow_groups, {{schema}}.workflow_jobs, '
                       '{{schema}}.workflow_count_marks TO %I', grantee);
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.create_workflow(text, bigint[], '
                       'integer[], integer[], text[], text[], bigint[], bigint[]) TO %I', grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT r.rolname
        FROM pg_attribute att
        CROSS JOIN LATERAL aclexplode(att.attacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE att.attrelid = '{{schema}}.jobs'::regclass AND att.attname = 'task'
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.create_workflow(text, bigint[], '
                       'integer[], integer[], text[], text[], bigint[], bigint[]) TO %I', grantee);
    END LOOP;
END
$do$;
