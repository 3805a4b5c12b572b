-- aiopgq schema, version 1.
-- {{schema}} is replaced by the validated, quoted schema name before this runs.

CREATE TYPE {{schema}}.job_status AS ENUM ('pending', 'running', 'done', 'failed', 'cancelled');

CREATE TABLE {{schema}}.jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue           text        NOT NULL DEFAULT 'default',
    task            text        NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status          {{schema}}.job_status NOT NULL DEFAULT 'pending',
    priority        integer     NOT NULL DEFAULT 0,
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL DEFAULT 5,
    run_at          timestamptz NOT NULL DEFAULT now(),
    locked_at       timestamptz,
    locked_by       text,
    heartbeat_at    timestamptz,
    last_error      text,
    result          jsonb,
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT jobs_queue_not_empty CHECK (queue <> ''),
    CONSTRAINT jobs_task_not_empty CHECK (task <> ''),
    CONSTRAINT jobs_payload_is_object CHECK (jsonb_typeof(payload) = 'object')
)
-- A queue table is insert/update/delete heavy: leave room on each page for the
-- status updates (fillfactor) and vacuum after 1% churn rather than the default 20%.
WITH (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 1
);

-- The dequeue reads only this index: pending rows, in dequeue order.
CREATE INDEX jobs_pending_idx ON {{schema}}.jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending';

-- The rescuer finds expired leases without touching finished rows.
CREATE INDEX jobs_running_idx ON {{schema}}.jobs (heartbeat_at)
    WHERE status = 'running';

-- The pruner deletes the oldest finished rows in bounded batches.
CREATE INDEX jobs_finished_idx ON {{schema}}.jobs (finished_at)
    WHERE status IN ('done', 'failed', 'cancelled');

-- One live job per idempotency key: finished jobs release the key.
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON {{schema}}.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running');

-- Per-queue settings. A queue without a row uses the defaults.
CREATE TABLE {{schema}}.queues (
    queue  text PRIMARY KEY,
    notify boolean NOT NULL DEFAULT true
);

-- Wake workers: one NOTIFY per statement per distinct queue with runnable rows.
-- Channel = schema name, payload = queue name. Future run_at rows send nothing;
-- queues switched to poll-only send nothing.
CREATE FUNCTION {{schema}}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN
        SELECT DISTINCT n.queue FROM new_jobs n
        WHERE n.status = 'pending' AND n.run_at <= now()
          AND NOT EXISTS (
              SELECT 1 FROM {{schema}}.queues s WHERE s.queue = n.queue AND NOT s.notify)
    LOOP
        PERFORM pg_notify(TG_TABLE_SCHEMA, q);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify AFTER INSERT ON {{schema}}.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.notify_jobs();

-- Enqueue from any client with plain SQL:
--   SELECT aiopgq.enqueue('task.name', '{"a": 1}', queue => 'default');
CREATE FUNCTION {{schema}}.enqueue(
    task text,
    payload jsonb DEFAULT '{}'::jsonb,
    queue text DEFAULT 'default',
    run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT 5
) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO {{schema}}.jobs (task, payload, queue, run_at, priority, max_attempts)
    VALUES (enqueue.task, coalesce(enqueue.payload, '{}'::jsonb), enqueue.queue,
            coalesce(enqueue.run_at, now()), enqueue.priority, enqueue.max_attempts)
    RETURNING id;
$$;
