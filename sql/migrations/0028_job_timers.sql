-- Timers of suspended jobs (durable steps). A job that sleeps, or waits for an event
-- with a timeout, until more than a minute ahead waits in status 'waiting', off
-- jobs_pending_idx (so it costs the claim nothing), with its wake time here; the
-- maintenance leader makes it pending ahead of that time at its exact run_at
-- (sql/maintain/promote_timers.sql). Nearer wake times stay pending rows, as retries are.
CREATE TABLE {{schema}}.job_timers (
    job_id bigint NOT NULL,
    due_at timestamp with time zone NOT NULL,
    CONSTRAINT job_timers_pkey PRIMARY KEY (job_id)
);
CREATE INDEX job_timers_due_idx ON {{schema}}.job_timers USING btree (due_at);

-- Roles granted before this version: workers (the roles that may update jobs) get the
-- table, as grant_worker() now grants it.
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.job_timers TO %I',
                       grantee);
    END LOOP;
END
$do$;
