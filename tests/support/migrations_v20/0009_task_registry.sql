-- aiopgq schema, version 9: the task registry, and retention per finished status.
--
-- Workers record the tasks they serve when they start (sql/register_tasks.sql, one
-- upsert per start, never on the hot path). Enqueue by name -- from Python in a
-- process that did not register the task, from the CLI, from the SQL function --
-- takes the task's queue, priority and max_attempts from here when the caller
-- gives none, and refuses a name no worker registered (while any worker registered
-- some: an empty registry keeps the old behaviour, so nothing breaks on upgrade).
-- The row is the declaration of the worker that started last.
CREATE TABLE {{schema}}.tasks (
    name          text PRIMARY KEY,
    queue         text        NOT NULL,
    priority      integer     NOT NULL,
    max_attempts  integer     NOT NULL,
    -- The task function's parameters that a payload may name, in order; those
    -- without a default; whether it takes **kwargs (then any name is accepted).
    arguments     text[]      NOT NULL,
    required      text[]      NOT NULL,
    any_keyword   boolean     NOT NULL,
    registered_by text        NOT NULL,
    first_registered_at timestamptz NOT NULL DEFAULT now(),
    registered_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tasks_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT tasks_queue_not_empty CHECK (queue <> '')
);

-- The SQL contract, same signature and argument names as version 1: queue,
-- priority and max_attempts now default to NULL, meaning "the task's declaration,
-- else 'default', 0 and 5". Refuses an unknown task while the registry is not empty
-- (SQLSTATE P0002, no_data_found), naming the known ones, and a payload whose keys
-- do not fit the declared arguments (22023, invalid_parameter_value). Not SECURITY DEFINER:
-- the caller's own INSERT privilege applies, and enqueued_by stays the caller.
CREATE OR REPLACE FUNCTION {{schema}}.enqueue(
    task text,
    payload jsonb DEFAULT '{}'::jsonb,
    queue text DEFAULT NULL,
    run_at timestamptz DEFAULT now(),
    priority integer DEFAULT NULL,
    max_attempts integer DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    declared {{schema}}.tasks%ROWTYPE;
    known text;
    new_id bigint;
BEGIN
    SELECT * INTO declared FROM {{schema}}.tasks t WHERE t.name = enqueue.task;
    IF NOT FOUND THEN
        SELECT string_agg(t.name, ', ' ORDER BY t.name) INTO known FROM {{schema}}.tasks t;
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'no task named % is registered (known: %)', quote_literal(task), known
                USING ERRCODE = 'no_data_found',
                      HINT = 'check the name, or start a worker whose queue registers the task';
        END IF;
    ELSIF NOT declared.any_keyword OR NOT coalesce(enqueue.payload, '{}') ?& declared.required THEN
        SELECT string_agg(quote_literal(k), ', ') INTO known
        FROM jsonb_object_keys(coalesce(enqueue.payload, '{}')) AS k
        WHERE NOT declared.any_keyword AND k <> ALL (declared.arguments);
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'task %: unexpected argument(s) %', task, known
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('the task takes %s', array_to_string(declared.arguments, ', '));
        END IF;
        SELECT string_agg(quote_literal(r), ', ') INTO known
        FROM unnest(declared.required) AS r
        WHERE NOT coalesce(enqueue.payload, '{}') ? r;
        IF known IS NOT NULL THEN
            RAISE EXCEPTION 'task %: missing required argument(s) %', task, known
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('the task takes %s', array_to_string(declared.arguments, ', '));
        END IF;
    END IF;
    INSERT INTO {{schema}}.jobs (task, payload, queue, run_at, priority, max_attempts)
    VALUES (enqueue.task, coalesce(enqueue.payload, '{}'::jsonb),
            coalesce(enqueue.queue, declared.queue, 'default'),
            coalesce(enqueue.run_at, now()),
            coalesce(enqueue.priority, declared.priority, 0),
            coalesce(enqueue.max_attempts, declared.max_attempts, 5))
    RETURNING id INTO new_id;
    RETURN new_id;
END
$$;

-- Producers read the registry (enqueue by name); workers also write it.
CREATE OR REPLACE FUNCTION {{schema}}.grant_producer(role_name name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT INSERT (task, payload, queue, priority, run_at, max_attempts, '
                   'idempotency_key) ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT (id, run_at, created_at, idempotency_key, status) '
                   'ON %I.jobs TO %I', '{{schema_name}}', role_name);
    EXECUTE format('GRANT SELECT ON %I.queues, %I.schema_version, %I.tasks TO %I',
                   '{{schema_name}}', '{{schema_name}}', '{{schema_name}}', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %I.enqueue(text, jsonb, text, timestamptz, '
                   'integer, integer), %I.job_status(bigint) TO %I',
                   '{{schema_name}}', '{{schema_name}}', role_name);
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
END
$$;

-- Roles granted before this version get the registry privileges of their kind:
-- workers (UPDATE on jobs) read and write it, producers (INSERT on jobs.task) read it.
DO $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = '{{schema}}.jobs'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I.tasks TO %s',
                       '{{schema_name}}', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = '{{schema}}.jobs'::regclass AND t.attname = 'task'
          AND a.privilege_type = 'INSERT' AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT SELECT ON %I.tasks TO %s', '{{schema_name}}', role_name);
    END LOOP;
END
$$;

-- Retention per status: done rows are pruned after a day by default, failed and
-- cancelled rows after a week (they carry the reason). The pruner deletes one
-- status at a time, oldest first, so the index leads with the status: pruning done
-- rows never walks past a week of kept failures, and the reverse.
CREATE INDEX jobs_finished_by_status_idx ON {{schema}}.jobs (status, finished_at)
    WHERE status IN ('done', 'failed', 'cancelled');
DROP INDEX {{schema}}.jobs_finished_idx;
