-- aiopgq schema, version 24, for a fresh install: the tables, types, indexes and
-- constraints as the numbered migrations up to 24 leave them, without the functions and
-- the trigger (sql/functions/, applied after this) and schema_version (migrate() makes
-- it). An installed schema is upgraded by the numbered migrations instead (sql/README.md).

-- The payload size limit is data: set_max_payload_bytes() rewrites it
-- (sql/functions/payload_limit.sql says why).
CREATE FUNCTION {{schema}}.payload_limit() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT 8388608::bigint$$;


-- pending and running jobs are live, done, failed and cancelled ones finished (a failed
-- attempt with attempts left goes back to pending); waiting ones wait for their parents
-- (job_dependencies), then become pending. 'waiting' is last: migration 0024 added it.
CREATE TYPE {{schema}}.job_status AS ENUM (
    'pending',
    'running',
    'done',
    'failed',
    'cancelled',
    'waiting'
);

-- The archive's layout switch and its settings: one row (only_row). The layout and why
-- it exists: sql/functions/archive.sql.
CREATE TABLE {{schema}}.archive_layout (
    only_row boolean DEFAULT true NOT NULL,
    enabled boolean DEFAULT false NOT NULL,
    -- Seconds a finished row stays in jobs: at least a minute, since queue_stats (the
    -- dashboard's rates) reads the recently finished rows in jobs.
    archive_after double precision DEFAULT 300 NOT NULL,
    partition_width integer DEFAULT 86400 NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT archive_layout_archive_after CHECK ((archive_after >= (60)::double precision)),
    CONSTRAINT archive_layout_one_row CHECK (only_row),
    CONSTRAINT archive_layout_partition_width CHECK ((partition_width >= 60))
);

-- The archive's partitions made so far (archive_extend()): [from_at, to_at) of
-- finished_at, per status. The first of a status starts at -infinity (MINVALUE): it
-- takes the rows that had finished before the layout was switched on.
CREATE TABLE {{schema}}.archive_partitions (
    status {{schema}}.job_status NOT NULL,
    from_at timestamp with time zone NOT NULL,
    to_at timestamp with time zone NOT NULL,
    name text NOT NULL
);

-- One row per idempotency key that enqueue_unique() has seen: the job that took the key
-- last, and how long that job keeps it once done. Whether the job still holds the key
-- is read from the job itself: it does while pending or running, and while done for
-- less than `unique_for`; failed and cancelled jobs let go (they did not do the work).
-- Every keyed enqueue locks its keys' rows first, so enqueues of one key settle one
-- after the other (sql/functions/enqueue_unique.sql). Rows go with their jobs
-- (sql/maintain/prune.sql, archive_move.sql), which keep a done job while it holds its
-- key. A table of its own: a column or a partial index on jobs would cost every insert
-- and every claim, keyed or not.
CREATE TABLE {{schema}}.job_keys (
    key text NOT NULL,
    job_id bigint,
    unique_for interval
);

-- The edges of depends_on=: one row per child and parent, kept with the child (the
-- rows go when the child is pruned or archived: sql/maintain/prune.sql,
-- archive_move.sql). `outcome` is the parent's final status once it has one (NULL
-- before), and `result` its result when done: the completion that ends the parent
-- writes both (sql/functions/dependencies.sql), so deciding the child and
-- ctx.parent_results() never need the parent's row, which may since have been archived
-- or pruned. A table of its own, like job_keys: jobs without dependencies store nothing.
CREATE TABLE {{schema}}.job_dependencies (
    child_id bigint NOT NULL,
    parent_id bigint NOT NULL,
    outcome {{schema}}.job_status,
    result jsonb
);

-- The queue: one row per job, from its enqueue until it is pruned or archived. Every
-- column costs each insert and each claim some server instructions, whether it holds
-- anything or not, so features keep their state in tables of their own (job_keys,
-- periodic_ticks) or in one nullable column (metadata), and the optional columns below
-- are nullable without a default: a job that uses none of them stores nothing (a NULL
-- costs a bit in the null bitmap every row already has).
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
    -- The role that enqueued the job: job_status() and enqueue_unique() show a producer
    -- only its own jobs.
    enqueued_by name DEFAULT CURRENT_USER,
    -- The errors of the job's failed attempts, oldest first: a JSON array of objects
    -- {"at": epoch seconds, "attempt": n, "worker": id or null, "error": text}, at most
    -- the last 10 (push_error(), sql/functions/metadata.sql; each error is capped by the
    -- worker: aiopgq/_worker/failures.py). last_error stays the latest one. A column,
    -- not a table: reading a job stays one index lookup, the pruner deletes a job's
    -- history with its row, and a failure writes no second row (its UPDATE rewrites the
    -- job's row anyway). NULL until the first failure.
    errors jsonb,
    -- The trace context (W3C traceparent, tracestate, baggage) of the span that enqueued
    -- the job, written only by producers that trace (aiopgq.tracing), so the span of its
    -- execution can be that span's child; the statements of producers and workers that
    -- do not trace neither write nor read it.
    trace_context jsonb,
    -- The key of a queue's key_concurrency limit (sql/functions/claim_limited.sql).
    concurrency_key text,
    -- What handlers report and ask for, each key absent until used:
    --   progress    the fraction a handler last reported (ctx.progress), 0..1
    --   checkpoint  the state it reported with it; a later run gets it as ctx.checkpoint
    --   history     its snoozes and aborts, oldest first, the last 20 (push_history()):
    --               objects {"event": "snooze" | "abort", "at": epoch seconds,
    --               "attempt": n, "worker": id, "seconds": s (snooze), "reason": text
    --               (abort), "over_limit": true (a snooze past the task's max_snoozes,
    --               counted as a failed attempt)}
    --   snoozes     how many times it snoozed, bounded by the task's max_snoozes
    --   waited      true: someone awaits its end (queue.result(), job.wait()). The
    --               statements that end a job announce it on the done channel (payload:
    --               the job id) for these rows only; never cleared.
    --   dependents  true: some job depends on this one (set by add_dependencies()
    --               when a child is enqueued). The statements that end a job settle its
    --               children for these rows only (sql/functions/dependencies.sql).
    --   on_parent_failure  "cancel" or "run": this job has parents, and what a parent
    --               that ends failed or cancelled does to it.
    --   cancelled_by  the parent whose failure cancelled it: retrying that parent
    --               revives it (revive_dependents()).
    -- One column, not one per key: five columns would cost five times one. Failures
    -- keep their own history, `errors`; `history` holds what is not an error (an abort
    -- is in both).
    metadata jsonb,
    CONSTRAINT jobs_max_attempts_positive CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_payload_is_object CHECK ((jsonb_typeof(payload) = 'object'::text)),
    CONSTRAINT jobs_queue_not_empty CHECK ((queue <> ''::text)),
    CONSTRAINT jobs_task_not_empty CHECK ((task <> ''::text))
)
-- A queue table is insert/update/delete heavy: leave room on each page for the status
-- updates (fillfactor) and vacuum after 1% churn rather than the default 20%.
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02', autovacuum_analyze_threshold='1000', autovacuum_vacuum_cost_delay='1');

-- Finished jobs in the partitioned layout (sql/functions/archive.sql), by status, then
-- by ranges of finished_at (the partitions archive_extend() makes). Every column of
-- jobs, in the same order: the move inserts `SELECT *` of the rows it deletes
-- (sql/maintain/archive_move.sql; tests/worker/test_archive.py checks the two stay
-- alike), so a migration that adds a column to jobs adds it here too.
CREATE TABLE {{schema}}.jobs_archive (LIKE {{schema}}.jobs) PARTITION BY LIST (status);
CREATE TABLE {{schema}}.jobs_archive_cancelled PARTITION OF {{schema}}.jobs_archive
    FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);
CREATE TABLE {{schema}}.jobs_archive_done PARTITION OF {{schema}}.jobs_archive
    FOR VALUES IN ('done') PARTITION BY RANGE (finished_at);
CREATE TABLE {{schema}}.jobs_archive_failed PARTITION OF {{schema}}.jobs_archive
    FOR VALUES IN ('failed') PARTITION BY RANGE (finished_at);

ALTER TABLE {{schema}}.jobs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME {{schema}}.jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- The job of each tick of a periodic task: one per task and tick time (a second one
-- aborts the statement that inserts it, jobs and all: take_ticks()). Rows go with their
-- jobs (sql/maintain/prune.sql).
CREATE TABLE {{schema}}.periodic_ticks (
    name text NOT NULL,
    tick timestamp with time zone NOT NULL,
    job_id bigint NOT NULL
);

-- Per-queue settings. A queue without a row uses the defaults, and the plain claim
-- never reads this table.
CREATE TABLE {{schema}}.queues (
    queue text NOT NULL,
    -- false: a poll-only queue, whose inserts send no NOTIFY (sql/functions/wake.sql).
    notify boolean DEFAULT true NOT NULL,
    -- Workers read this flag when they start, when the LISTEN connection (re)connects,
    -- on the control NOTIFYs that pause and resume send, and every half poll interval as
    -- a fallback; they leave paused queues out of the list their claim reads (the claim
    -- statement itself does not look at it: aiopgq/_worker/pauses.py). Enqueueing into a
    -- paused queue works as always.
    paused boolean DEFAULT false NOT NULL,
    -- Flow control (sql/functions/claim_limited.sql): at most `concurrency` running jobs
    -- of the queue; `rate` job starts per second, `burst` at once after a quiet spell (a
    -- token bucket); at most `key_concurrency` running jobs per concurrency_key.
    concurrency integer,
    rate double precision,
    burst integer,
    key_concurrency integer,
    -- The token bucket: tokens left at tokens_at (NULL: full). Written by claims.
    tokens double precision,
    tokens_at timestamp with time zone,
    -- Round-robin over keys: the next claim starts after this key.
    key_cursor text,
    CONSTRAINT queues_burst_check CHECK ((burst >= 1)),
    CONSTRAINT queues_concurrency_check CHECK ((concurrency >= 1)),
    CONSTRAINT queues_key_concurrency_check CHECK ((key_concurrency >= 1)),
    CONSTRAINT queues_rate_check CHECK (((rate > (0)::double precision) AND (rate <= ('1000000000'::numeric)::double precision)))
);

-- One row per periodic task, written by the workers that run it. `last_tick` only moves
-- forward, by take_ticks() (a compare-and-set), so of the workers that find the same
-- ticks due, one enqueues them.
CREATE TABLE {{schema}}.schedules (
    name text NOT NULL,                    -- the periodic task's name
    cron text NOT NULL,
    timezone text NOT NULL,
    missed text NOT NULL,                  -- latest | skip | all
    queue text NOT NULL,
    -- Ticks after this are due.
    since timestamp with time zone DEFAULT now() NOT NULL,
    -- The newest tick taken (run or dropped), and the worker that took it.
    last_tick timestamp with time zone,
    last_worker text,
    -- When a worker last registered it.
    registered_at timestamp with time zone DEFAULT now() NOT NULL
);

-- The task registry. Workers record the tasks they serve when they start
-- (sql/workers/register_tasks.sql, one upsert per start, never on the hot path).
-- Enqueue by name -- from Python in a process that did not register the task, from the
-- CLI, from the SQL function enqueue() -- takes the task's queue, priority and
-- max_attempts from here when the caller gives none, and refuses a name no worker
-- registered while any worker registered some (an empty registry refuses nothing). The
-- row is the declaration of the worker that started last.
CREATE TABLE {{schema}}.tasks (
    name text NOT NULL,
    queue text NOT NULL,
    priority integer NOT NULL,
    max_attempts integer NOT NULL,
    -- The task function's parameters that a payload may name, in order; those without a
    -- default; whether it takes **kwargs (then any name is accepted).
    arguments text[] NOT NULL,
    required text[] NOT NULL,
    any_keyword boolean NOT NULL,
    registered_by text NOT NULL,
    first_registered_at timestamp with time zone DEFAULT now() NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tasks_max_attempts_positive CHECK ((max_attempts >= 1)),
    CONSTRAINT tasks_queue_not_empty CHECK ((queue <> ''::text))
);

-- Every running worker keeps one row here: written when it starts and on each of its
-- heartbeats (an upsert, so a row expired during an outage comes back), deleted when it
-- stops cleanly. The maintenance leader deletes the rows of workers not seen for three
-- of their own heartbeat intervals (killed, or cut off: sql/maintain/expire_workers.sql).
-- No foreign key from jobs.locked_by: a job outlives the worker that claimed it (the
-- rescuer finds it by its lease), and a claim must not touch a second table.
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

ALTER TABLE ONLY {{schema}}.archive_layout
    ADD CONSTRAINT archive_layout_pkey PRIMARY KEY (only_row);

ALTER TABLE ONLY {{schema}}.archive_partitions
    ADD CONSTRAINT archive_partitions_name_key UNIQUE (name);

ALTER TABLE ONLY {{schema}}.archive_partitions
    ADD CONSTRAINT archive_partitions_pkey PRIMARY KEY (status, from_at);

ALTER TABLE ONLY {{schema}}.job_keys
    ADD CONSTRAINT job_keys_pkey PRIMARY KEY (key);

ALTER TABLE ONLY {{schema}}.job_dependencies
    ADD CONSTRAINT job_dependencies_pkey PRIMARY KEY (child_id, parent_id);

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

-- A finished parent's children: its completion finds its edges by parent.
CREATE INDEX job_dependencies_parent_idx ON {{schema}}.job_dependencies USING btree (parent_id);

-- The children with a parent not finished yet: every waiting job has one, so
-- queue_stats finds the waiting jobs here (jobs has no index that holds them).
CREATE INDEX job_dependencies_open_idx ON {{schema}}.job_dependencies USING btree (child_id) WHERE (outcome IS NULL);

-- get_job and retry look archived jobs up by id (one probe per partition).
CREATE INDEX jobs_archive_id_idx ON {{schema}}.jobs_archive USING btree (id);

-- Retention per status (done rows after a day by default, failed and cancelled after a
-- week: they carry the reason). The pruner deletes one status at a time, oldest first,
-- so the index leads with the status: pruning done rows never walks past a week of kept
-- failures, and the reverse.
CREATE INDEX jobs_finished_by_status_idx ON {{schema}}.jobs USING btree (status, finished_at) WHERE (status = ANY (ARRAY['done'::{{schema}}.job_status, 'failed'::{{schema}}.job_status, 'cancelled'::{{schema}}.job_status]));

-- One live job per idempotency key: what a plain INSERT with a key meets, and the
-- constraint enqueue_unique() names; finished jobs release it (job_keys keeps a done
-- job's key for unique_for).
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON {{schema}}.jobs USING btree (idempotency_key) WHERE ((idempotency_key IS NOT NULL) AND (status = ANY (ARRAY['pending'::{{schema}}.job_status, 'running'::{{schema}}.job_status])));

-- The plain claim reads only this index: pending rows, in claim order. Keyed by the
-- fixed-width hashtext(queue), not the text: every insert adds a row to it, and the B-tree compares
-- the new key with about a dozen keys on its way down; after a text first column no key
-- attribute has a fixed offset, so each comparison would walk the tuple to find
-- priority, run_at and id and compare the text through the collation. The claim reads
-- the same order: hashtext(queue) = hashtext($1) is the index condition, `queue = $1` a
-- filter that keeps out the rows of another queue whose name has the same 32-bit hash
-- (rare: it costs reading them, never a wrong claim).
CREATE INDEX jobs_pending_idx ON {{schema}}.jobs USING btree (hashtext(queue), priority DESC, run_at, id) WHERE (status = 'pending'::{{schema}}.job_status);

-- The rows with a lease (heartbeat_at set), for the rescuer and for counting running
-- jobs. Every claimed row gets heartbeat_at and every way out of `running` clears it,
-- so these are the running rows; but the predicate is the lease, not status = 'running',
-- because a partial index whose predicate a query implies may be read whole: the
-- completions (`status = 'running' AND locked_by = ...`, looked up by id) would imply
-- that one, and a generic plan made while statistics showed one running row would scan
-- it once per outcome, quadratic in the batch. Only statements about the lease itself
-- (heartbeat_at < ..., heartbeat_at IS NOT NULL: the rescuer, the orphan release, the
-- limited claim's counts) imply this predicate, so the completions find each job by id.
CREATE INDEX jobs_running_idx ON {{schema}}.jobs USING btree (heartbeat_at) WHERE (heartbeat_at IS NOT NULL);




-- The archive's one settings row (the plain layout).
INSERT INTO {{schema}}.archive_layout DEFAULT VALUES;
