-- aiopgq schema, version 13: the workers registry, and the trace context of a job.

-- Every running worker keeps one row here: written when it starts and on each of
-- its heartbeats (an upsert, so a row expired during an outage comes back), deleted
-- when it stops cleanly. The maintenance leader deletes the rows of workers not seen
-- for three of their own heartbeat intervals (killed, or cut off). No foreign key
-- from jobs.locked_by: a job outlives the worker that claimed it (the rescuer finds
-- it by its lease), and a claim must not touch a second table.
CREATE TABLE {{schema}}.workers (
    id                 text        PRIMARY KEY,
    host               text        NOT NULL,
    pid                integer     NOT NULL,
    queues             text[]      NOT NULL,
    concurrency        integer     NOT NULL,
    version            text        NOT NULL,
    heartbeat_interval float8      NOT NULL,
    started_at         timestamptz NOT NULL DEFAULT now(),
    last_seen          timestamptz NOT NULL DEFAULT now()
);

-- The trace context (W3C traceparent, tracestate, baggage) of the span that
-- enqueued the job, written only by producers that trace (aiopgq.tracing), so the
-- span of its execution can be that span's child. NULL otherwise. Nullable and
-- without a default: adding it rewrites no row, and the statements of producers and
-- workers that do not trace neither write nor read it.
ALTER TABLE {{schema}}.jobs ADD COLUMN trace_context jsonb;

-- The grant functions of version 10 (keep every later version's a superset), with what
-- this version adds: a producer may write the trace context, a worker keeps its row in
-- the workers registry.
CREATE OR REPLACE FUNCTION {{schema}}.grant_producer(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT INSERT (task, payload, queue, priority, run_at, max_attempts, '
                   'idempotency_key, trace_context) ON %I.jobs TO %I', '{{schema_name}}',
                   role_name);
    EXECUTE format('GRANT SELECT (id, run_at, created_at, idempotency_key, status) '
                   'ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version, %I.tasks TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.enqueue(text, jsonb, text, timestamptz, '
                   'integer, integer, text, interval, text), %I.enqueue_unique(text, jsonb, '
                   'text[], text, integer, timestamptz, integer, interval, text), '
                   '%I.job_status(bigint) TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.grant_worker(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.tasks TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.schedules TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.job_keys, %I.periodic_ticks TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.take_ticks(text, timestamptz, timestamptz, '
                   'text, text, integer, integer, timestamptz[], text[]) TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.workers TO %I',
                   '{{schema_name}}', role_name);
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.grant_producer(name), {{schema}}.grant_worker(name) FROM PUBLIC;

-- Roles granted before this version get the same additions: workers are the roles
-- that may update jobs, producers those that may insert its task column.
DO $$
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.workers TO %I',
                       '{{schema_name}}', grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT r.rolname
        FROM pg_attribute att
        CROSS JOIN LATERAL aclexplode(att.attacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE att.attrelid = '{{schema}}.jobs'::regclass AND att.attname = 'task'
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT INSERT (trace_context) ON %I.jobs TO %I', '{{schema_name}}', grantee);
    END LOOP;
END
$$;
