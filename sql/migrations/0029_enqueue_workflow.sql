-- enqueue_workflow(): a workflow's jobs inserted with their graph's metadata and status,
-- each row written once (sql/functions/workflows.sql writes its body over this stub;
-- CREATE OR REPLACE keeps grants). Every role that may call create_workflow() may call
-- it: grant_producer() and grant_worker() now grant both.
CREATE FUNCTION {{schema}}.enqueue_workflow(name text, tasks text[], payloads jsonb,
    queues text[], priorities integer[], run_ats timestamp with time zone[],
    max_attempts integer[], concurrency_keys text[], policies text[], group_names text[],
    edge_children integer[], edge_parents integer[], OUT workflow_id bigint,
    OUT ids bigint[], OUT created_at timestamp with time zone)
 RETURNS record LANGUAGE sql
 AS 'SELECT NULL::bigint, NULL::bigint[], NULL::timestamp with time zone';
REVOKE ALL ON FUNCTION {{schema}}.enqueue_workflow(text, text[], jsonb, text[], integer[],
    timestamp with time zone[], integer[], text[], text[], text[], integer[], integer[]) FROM PUBLIC;
DO $do$
DECLARE
    grantee name;
BEGIN
    FOR grantee IN
        SELECT DISTINCT r.rolname
        FROM pg_proc p
        CROSS JOIN LATERAL aclexplode(p.proacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE p.oid = '{{schema}}.create_workflow(text, bigint[], integer[], integer[], text[], text[], bigint[], bigint[])'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.enqueue_workflow(text, text[], '
                       'jsonb, text[], integer[], timestamp with time zone[], integer[], '
                       'text[], text[], text[], integer[], integer[]) TO %I', grantee);
    END LOOP;
END
$do$;
