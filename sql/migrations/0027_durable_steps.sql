-- Durable steps (ctx.step, ctx.sleep, ctx.wait_event) and events (emit_event).
-- Their state is kept in tables of their own, not in jobs: a job that uses no step pays
-- nothing (no column, no index entry, no statement), and a step's row is written by one
-- INSERT, in the transaction of the step's own database work when it has some
-- (aiopgq/_steps.py and sql/functions/steps.sql argue why each guarantee holds).

-- What a job's runs completed, in the order the handler called them. A row is written
-- only when its step returned (a step that raises leaves none), fenced by the lease of
-- the run that wrote it; every later run of the job replays it instead of calling the
-- step again. No foreign key to jobs: a job moves to the archive and back (restore),
-- and the statements that delete or archive a job delete its steps with it
-- (sql/maintain/prune.sql, archive_move.sql).
--   position    the step's place in the handler's sequence, from 0; with the name it
--               lets a later run tell a replay from a handler whose steps changed
--   name        unique within the job: two steps of one run cannot share a name
--   kind        'step' (ctx.step), 'sleep' (ctx.sleep: result {"until": epoch}) or
--               'event' (ctx.wait_event: result {"payload": value} or {"timeout": true})
--   result      the step's return value (JSON); NULL for a step that returned None
--   attempt     the attempt of the run that recorded it
--   started_at, finished_at  when its run started and recorded it (the duration shown by
--               `aiopgq job` and the dashboard)
CREATE TABLE {{schema}}.job_steps (
    job_id bigint NOT NULL,
    "position" integer NOT NULL,
    name text NOT NULL,
    kind text DEFAULT 'step'::text NOT NULL,
    result jsonb,
    attempt integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT job_steps_pkey PRIMARY KEY (job_id, "position"),
    CONSTRAINT job_steps_name_key UNIQUE (job_id, name),
    CONSTRAINT job_steps_kind_check CHECK (kind = ANY (ARRAY['step'::text, 'sleep'::text,
        'event'::text])),
    CONSTRAINT job_steps_name_not_empty CHECK (name <> ''::text)
);

-- What a suspended job waits for: one row per job, while it waits (ctx.sleep writes
-- none: a sleeping job is a pending job whose run_at is its wake time; its sleep is a
-- job_steps row). An event waiter is in status 'waiting' (off jobs_pending_idx, so it
-- costs the claim nothing), or pending at its timeout (`until`) when it has one, or
-- pending at 'infinity' when it holds an idempotency key (functions/steps.sql says why);
-- emit_event() finds the waiters of a name by job_waits_event_idx.
CREATE TABLE {{schema}}.job_waits (
    job_id bigint NOT NULL,
    "position" integer NOT NULL,
    event text NOT NULL,
    until timestamp with time zone,
    since timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT job_waits_pkey PRIMARY KEY (job_id)
);
CREATE INDEX job_waits_event_idx ON {{schema}}.job_waits USING btree (event);

-- The last emission of each event name, so that an emit that comes before the wait is
-- not lost: a later wait_event() of the name returns its payload at once. Emitting a
-- name again replaces it; the maintenance leader deletes emissions older than the
-- retention (30 days, sql/maintain/prune_events.sql).
CREATE TABLE {{schema}}.events (
    name text NOT NULL,
    payload jsonb,
    emitted_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (name),
    CONSTRAINT events_name_not_empty CHECK (name <> ''::text)
);
CREATE INDEX events_emitted_at_idx ON {{schema}}.events USING btree (emitted_at);

-- Roles granted before this version: workers (the roles that may update jobs) get the
-- new tables, as grant_worker() now grants them; emit_event() (functions/events.sql) is
-- granted by grant_producer() and grant_worker(), wait_event() (functions/steps.sql) by
-- grant_worker(): stubs here, granted to those roles, whose bodies the functions files
-- write (CREATE OR REPLACE keeps grants).
CREATE FUNCTION {{schema}}.emit_event(name text, payload jsonb DEFAULT NULL::jsonb)
 RETURNS integer LANGUAGE sql AS 'SELECT NULL::integer';
REVOKE ALL ON FUNCTION {{schema}}.emit_event(text, jsonb) FROM PUBLIC;
CREATE FUNCTION {{schema}}.wait_event(job bigint, attempt integer, worker text,
    step_position integer, event text, started timestamp with time zone,
    timeout_at timestamp with time zone)
 RETURNS TABLE(outcome text, payload text) LANGUAGE sql
 AS 'SELECT NULL::text, NULL::text';
REVOKE ALL ON FUNCTION {{schema}}.wait_event(bigint, integer, text, integer, text,
    timestamp with time zone, timestamp with time zone) FROM PUBLIC;
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.job_steps, '
                       '{{schema}}.job_waits, {{schema}}.events TO %I', grantee);
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.emit_event(text, jsonb), '
                       '{{schema}}.wait_event(bigint, integer, text, integer, text, '
                       'timestamptz, timestamptz) TO %I', grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT r.rolname
        FROM pg_attribute att
        CROSS JOIN LATERAL aclexplode(att.attacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE att.attrelid = '{{schema}}.jobs'::regclass AND att.attname = 'task'
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.emit_event(text, jsonb) TO %I',
                       grantee);
    END LOOP;
END
$do$;
