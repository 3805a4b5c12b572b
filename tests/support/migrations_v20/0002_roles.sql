-- aiopgq schema, version 2: least-privilege roles.
-- Roles are cluster-wide, so the migration creates none; these functions grant
-- an existing role exactly what a producer or a worker needs.

ALTER TABLE {{schema}}.jobs ADD COLUMN enqueued_by name DEFAULT current_user;

-- A producer's view of its own jobs (it has no SELECT on the table).
CREATE FUNCTION {{schema}}.job_status(job_id bigint)
RETURNS TABLE (id bigint, status text, attempts integer, last_error text, result jsonb,
               run_at timestamptz, finished_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT j.id, j.status::text, j.attempts, j.last_error, j.result, j.run_at, j.finished_at
    FROM {{schema}}.jobs j
    WHERE j.id = job_status.job_id AND j.enqueued_by = session_user;
$$;
REVOKE ALL ON FUNCTION {{schema}}.job_status(bigint) FROM PUBLIC;

-- Producers: enqueue (Python or SQL function), read back the new row's id and
-- times, look up a live idempotency key, read their own jobs' status. They
-- cannot claim, update or delete jobs.
CREATE FUNCTION {{schema}}.grant_producer(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT INSERT (task, payload, queue, priority, run_at, max_attempts, '
                   'idempotency_key) ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT (id, run_at, created_at, idempotency_key, status) '
                   'ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.enqueue(text, jsonb, text, timestamptz, '
                   'integer, integer), %I.job_status(bigint) TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
END
$$;

-- Workers: claim, heartbeat, complete, rescue and prune jobs; read settings.
CREATE FUNCTION {{schema}}.grant_worker(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
END
$$;
REVOKE ALL ON FUNCTION {{schema}}.grant_producer(name), {{schema}}.grant_worker(name) FROM PUBLIC;
