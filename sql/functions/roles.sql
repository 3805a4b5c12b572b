-- Grants for the roles of an application, called by the schema's owner:
--   SELECT aiopgq.grant_producer('app');  -- enqueue, read its own jobs' statuses
--   SELECT aiopgq.grant_worker('worker'); -- claim, complete, maintain, archive
-- Roles are cluster-wide, so migrate() creates none: these grant an existing role
-- exactly what a producer or a worker needs. Calling one again on a role brings its
-- grants up to this version's.

-- A producer inserts jobs (the columns an enqueue writes) and reads back what the
-- enqueue statements return: RETURNING needs SELECT on the returned columns (id, run_at,
-- created_at), nothing more. It never reads other jobs' keys or statuses: keyed enqueues
-- go through enqueue_unique(), which returns a key's holder only to the role that
-- enqueued it, and job_status() shows a producer its own jobs. A plain INSERT with a key
-- still meets the unique index jobs_idempotency_key_idx, which needs no SELECT (without
-- it the error's DETAIL does not show the key). The REVOKE takes back what older
-- versions granted on those columns.
CREATE OR REPLACE FUNCTION {{schema}}.grant_producer(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT INSERT (task, payload, queue, priority, run_at, max_attempts, '
                   'idempotency_key, trace_context, concurrency_key) ON %I.jobs TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('REVOKE SELECT (idempotency_key, status) ON %I.jobs FROM %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT (id, run_at, created_at) ON %I.jobs TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version, %I.tasks TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.enqueue(text, jsonb, text, timestamptz, '
                   'integer, integer, text, interval, text, text, bigint[], text, text), '
                   '%I.enqueue_unique(text, jsonb, text[], text, integer, timestamptz, '
                   'integer, interval, text), %I.job_status(bigint), '
                   '%I.add_dependencies(bigint[], bigint[], text), '
                   '%I.add_to_sequence(bigint[], text) TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', '{{schema_name}}',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.emit_event(text, jsonb) TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.create_workflow(text, bigint[], integer[], '
                   'integer[], text[], text[], bigint[], bigint[]), %I.enqueue_workflow(text, '
                   'text[], jsonb, text[], integer[], timestamp with time zone[], integer[], '
                   'text[], text[], text[], integer[], integer[]) TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.grant_producer(name) FROM PUBLIC;

-- A worker claims, heartbeats, completes and prunes jobs (whole rows of jobs), registers
-- itself and its tasks, takes periodic ticks, spends the queues' rate-limit tokens, and
-- moves finished jobs into the archive's partitions.
CREATE OR REPLACE FUNCTION {{schema}}.grant_worker(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT UPDATE (tokens, tokens_at, key_cursor) ON %I.queues TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.tasks, %I.schedules TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.job_keys, %I.periodic_ticks TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.job_dependencies TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.workers TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.jobs_archive TO %I',
                   '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.archive_layout, %I.archive_partitions TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.take_ticks(text, timestamptz, timestamptz, '
                   'text, text, integer, integer, timestamptz[], text[]), %I.archive_extend(), '
                   '%I.archive_drop(%I.job_status, timestamptz), '
                   '%I.add_dependencies(bigint[], bigint[], text), '
                   '%I.add_to_sequence(bigint[], text) TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', '{{schema_name}}',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, DELETE ON %I.sequences TO %I', '{{schema_name}}', role_name);
    -- Durable steps and events (migrations/0027_durable_steps.sql).
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.job_steps, %I.job_waits, '
                   '%I.events, %I.job_timers TO %I', '{{schema_name}}', '{{schema_name}}',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.emit_event(text, jsonb), %I.wait_event(bigint, '
                   'integer, text, integer, text, timestamptz, timestamptz) TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    -- Workflows (migrations/0025_workflows.sql).
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I.workflows, %I.workflow_groups, '
                   '%I.workflow_jobs, %I.workflow_count_marks TO %I', '{{schema_name}}',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.create_workflow(text, bigint[], integer[], '
                   'integer[], text[], text[], bigint[], bigint[]), %I.enqueue_workflow(text, '
                   'text[], jsonb, text[], integer[], timestamp with time zone[], integer[], '
                   'text[], text[], text[], integer[], integer[]) TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.grant_worker(name) FROM PUBLIC;
