-- aiopgq schema, version 23, for a fresh install: the tables, types, indexes and
-- constraints as the numbered migrations up to 23 leave them, without the functions and
-- the trigger (sql/functions/, applied after this) and schema_version (migrate() makes
-- it). An installed schema is upgraded by the numbered migrations instead (sql/README.md).

-- The payload size limit is data: set_max_payload_bytes() rewrites it (0022).
CREATE FUNCTION {{schema}}.payload_limit() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT 8388608::bigint$$;


CREATE TYPE {{schema}}.job_status AS ENUM (
    'pending',
    'running',
    'done',
    'failed',
    'cancelled'
);

CREATE TABLE {{schema}}.archive_layout (
    only_row boolean DEFAULT true NOT NULL,
    enabled boolean DEFAULT false NOT NULL,
    archive_after double precision DEFAULT 300 NOT NULL,
    partition_width integer DEFAULT 86400 NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT archive_layout_archive_after CHECK ((archive_after >= (60)::double precision)),
    CONSTRAINT archive_layout_one_row CHECK (only_row),
    CONSTRAINT archive_layout_partition_width CHECK ((partition_width >= 60))
);

CREATE TABLE {{schema}}.archive_partitions (
    status {{schema}}.job_status NOT NULL,
    from_at timestamp with time zone NOT NULL,
    to_at timestamp with time zone NOT NULL,
    name text NOT NULL
);

CREATE TABLE {{schema}}.job_keys (
    key text NOT NULL,
    job_id bigint,
    unique_for interval
);

CREATE TABLE {{schema}}.jobs (
    id bigint NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    task text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    status {{schema}}.job_status DEFAULT 'pending'::{{schema}}.job_status NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    locked_at timestamp with time zone,
    locked_by text,
    heartbeat_at timestamp with time zone,
    last_error text,
    result jsonb,
    idempotency_key text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    enqueued_by name DEFAULT CURRENT_USER,
    errors jsonb,
    trace_context jsonb,
    concurrency_key text,
    metadata jsonb,
    CONSTRAINT jobs_max_attempts_positive CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_payload_is_object CHECK ((jsonb_typeof(payload) = 'object'::text)),
    CONSTRAINT jobs_queue_not_empty CHECK ((queue <> ''::text)),
    CONSTRAINT jobs_task_not_empty CHECK ((task <> ''::text))
)
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02', autovacuum_analyze_threshold='1000', autovacuum_vacuum_cost_delay='1');

CREATE TABLE {{schema}}.jobs_archive (
    id bigint NOT NULL,
    queue text NOT NULL,
    task text NOT NULL,
    payload jsonb NOT NULL,
    status {{schema}}.job_status NOT NULL,
    priority integer NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    run_at timestamp with time zone NOT NULL,
    locked_at timestamp with time zone,
    locked_by text,
    heartbeat_at timestamp with time zone,
    last_error text,
    result jsonb,
    idempotency_key text,
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    enqueued_by name,
    errors jsonb,
    trace_context jsonb,
    concurrency_key text,
    metadata jsonb
)
PARTITION BY LIST (status);

CREATE TABLE {{schema}}.jobs_archive_cancelled (
    id bigint NOT NULL,
    queue text NOT NULL,
    task text NOT NULL,
    payload jsonb NOT NULL,
    status {{schema}}.job_status NOT NULL,
    priority integer NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    run_at timestamp with time zone NOT NULL,
    locked_at timestamp with time zone,
    locked_by text,
    heartbeat_at timestamp with time zone,
    last_error text,
    result jsonb,
    idempotency_key text,
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    enqueued_by name,
    errors jsonb,
    trace_context jsonb,
    concurrency_key text,
    metadata jsonb
)
PARTITION BY RANGE (finished_at);

CREATE TABLE {{schema}}.jobs_archive_done (
    id bigint NOT NULL,
    queue text NOT NULL,
    task text NOT NULL,
    payload jsonb NOT NULL,
    status {{schema}}.job_status NOT NULL,
    priority integer NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    run_at timestamp with time zone NOT NULL,
    locked_at timestamp with time zone,
    locked_by text,
    heartbeat_at timestamp with time zone,
    last_error text,
    result jsonb,
    idempotency_key text,
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    enqueued_by name,
    errors jsonb,
    trace_context jsonb,
    concurrency_key text,
    metadata jsonb
)
PARTITION BY RANGE (finished_at);

CREATE TABLE {{schema}}.jobs_archive_failed (
    id bigint NOT NULL,
    queue text NOT NULL,
    task text NOT NULL,
    payload jsonb NOT NULL,
    status {{schema}}.job_status NOT NULL,
    priority integer NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    run_at timestamp with time zone NOT NULL,
    locked_at timestamp with time zone,
    locked_by text,
    heartbeat_at timestamp with time zone,
    last_error text,
    result jsonb,
    idempotency_key text,
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    enqueued_by name,
    errors jsonb,
    trace_context jsonb,
    concurrency_key text,
    metadata jsonb
)
PARTITION BY RANGE (finished_at);

ALTER TABLE {{schema}}.jobs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME {{schema}}.jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE {{schema}}.periodic_ticks (
    name text NOT NULL,
    tick timestamp with time zone NOT NULL,
    job_id bigint NOT NULL
);

CREATE TABLE {{schema}}.queues (
    queue text NOT NULL,
    notify boolean DEFAULT true NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    concurrency integer,
    rate double precision,
    burst integer,
    key_concurrency integer,
    tokens double precision,
    tokens_at timestamp with time zone,
    key_cursor text,
    CONSTRAINT queues_burst_check CHECK ((burst >= 1)),
    CONSTRAINT queues_concurrency_check CHECK ((concurrency >= 1)),
    CONSTRAINT queues_key_concurrency_check CHECK ((key_concurrency >= 1)),
    CONSTRAINT queues_rate_check CHECK (((rate > (0)::double precision) AND (rate <= ('1000000000'::numeric)::double precision)))
);

CREATE TABLE {{schema}}.schedules (
    name text NOT NULL,
    cron text NOT NULL,
    timezone text NOT NULL,
    missed text NOT NULL,
    queue text NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    last_tick timestamp with time zone,
    last_worker text,
    registered_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE {{schema}}.tasks (
    name text NOT NULL,
    queue text NOT NULL,
    priority integer NOT NULL,
    max_attempts integer NOT NULL,
    arguments text[] NOT NULL,
    required text[] NOT NULL,
    any_keyword boolean NOT NULL,
    registered_by text NOT NULL,
    first_registered_at timestamp with time zone DEFAULT now() NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tasks_max_attempts_positive CHECK ((max_attempts >= 1)),
    CONSTRAINT tasks_queue_not_empty CHECK ((queue <> ''::text))
);

CREATE TABLE {{schema}}.workers (
    id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    queues text[] NOT NULL,
    concurrency integer NOT NULL,
    version text NOT NULL,
    heartbeat_interval double precision NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY {{schema}}.jobs_archive ATTACH PARTITION {{schema}}.jobs_archive_cancelled FOR VALUES IN ('cancelled');

ALTER TABLE ONLY {{schema}}.jobs_archive ATTACH PARTITION {{schema}}.jobs_archive_done FOR VALUES IN ('done');

ALTER TABLE ONLY {{schema}}.jobs_archive ATTACH PARTITION {{schema}}.jobs_archive_failed FOR VALUES IN ('failed');

ALTER TABLE ONLY {{schema}}.archive_layout
    ADD CONSTRAINT archive_layout_pkey PRIMARY KEY (only_row);

ALTER TABLE ONLY {{schema}}.archive_partitions
    ADD CONSTRAINT archive_partitions_name_key UNIQUE (name);

ALTER TABLE ONLY {{schema}}.archive_partitions
    ADD CONSTRAINT archive_partitions_pkey PRIMARY KEY (status, from_at);

ALTER TABLE ONLY {{schema}}.job_keys
    ADD CONSTRAINT job_keys_pkey PRIMARY KEY (key);

ALTER TABLE ONLY {{schema}}.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY {{schema}}.periodic_ticks
    ADD CONSTRAINT periodic_ticks_job_id_key UNIQUE (job_id);

ALTER TABLE ONLY {{schema}}.periodic_ticks
    ADD CONSTRAINT periodic_ticks_pkey PRIMARY KEY (name, tick);

ALTER TABLE ONLY {{schema}}.queues
    ADD CONSTRAINT queues_pkey PRIMARY KEY (queue);

ALTER TABLE ONLY {{schema}}.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);

ALTER TABLE ONLY {{schema}}.tasks
    ADD CONSTRAINT tasks_pkey PRIMARY KEY (name);

ALTER TABLE ONLY {{schema}}.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);

CREATE INDEX jobs_archive_id_idx ON ONLY {{schema}}.jobs_archive USING btree (id);

CREATE INDEX jobs_archive_cancelled_id_idx ON ONLY {{schema}}.jobs_archive_cancelled USING btree (id);

CREATE INDEX jobs_archive_done_id_idx ON ONLY {{schema}}.jobs_archive_done USING btree (id);

CREATE INDEX jobs_archive_failed_id_idx ON ONLY {{schema}}.jobs_archive_failed USING btree (id);

CREATE INDEX jobs_finished_by_status_idx ON {{schema}}.jobs USING btree (status, finished_at) WHERE (status = ANY (ARRAY['done'::{{schema}}.job_status, 'failed'::{{schema}}.job_status, 'cancelled'::{{schema}}.job_status]));

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON {{schema}}.jobs USING btree (idempotency_key) WHERE ((idempotency_key IS NOT NULL) AND (status = ANY (ARRAY['pending'::{{schema}}.job_status, 'running'::{{schema}}.job_status])));

CREATE INDEX jobs_pending_idx ON {{schema}}.jobs USING btree (hashtext(queue), priority DESC, run_at, id) WHERE (status = 'pending'::{{schema}}.job_status);

CREATE INDEX jobs_running_idx ON {{schema}}.jobs USING btree (heartbeat_at) WHERE (heartbeat_at IS NOT NULL);

ALTER INDEX {{schema}}.jobs_archive_id_idx ATTACH PARTITION {{schema}}.jobs_archive_cancelled_id_idx;

ALTER INDEX {{schema}}.jobs_archive_id_idx ATTACH PARTITION {{schema}}.jobs_archive_done_id_idx;

ALTER INDEX {{schema}}.jobs_archive_id_idx ATTACH PARTITION {{schema}}.jobs_archive_failed_id_idx;

-- The archive's one settings row (the plain layout).
INSERT INTO {{schema}}.archive_layout DEFAULT VALUES;
