-- A producer's view of its own jobs: the status of job `job_id`, in jobs or in the
-- archive, if the calling session's user enqueued it (enqueued_by), else no row.
--   SELECT * FROM aiopgq.job_status(42);
-- SECURITY DEFINER: a producer has no SELECT on those columns of jobs (grant_producer);
-- its search_path ends in pg_temp (sql/README.md: definer functions).
CREATE OR REPLACE FUNCTION {{schema}}.job_status(job_id bigint)
 RETURNS TABLE(id bigint, status text, attempts integer, last_error text, result jsonb, run_at timestamp with time zone, finished_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    (SELECT j.id, j.status::text, j.attempts, j.last_error, j.result, j.run_at, j.finished_at
     FROM {{schema}}.jobs j
     WHERE j.id = job_status.job_id AND j.enqueued_by = session_user)
    UNION ALL
    (SELECT a.id, a.status::text, a.attempts, a.last_error, a.result, a.run_at, a.finished_at
     FROM {{schema}}.jobs_archive a
     WHERE a.id = job_status.job_id AND a.enqueued_by = session_user)
    LIMIT 1;
$function$;

REVOKE ALL ON FUNCTION {{schema}}.job_status(job_id bigint) FROM PUBLIC;
