-- aiopgq.testing.run_jobs, after the run: the jobs unfinished before it ($1) and those
-- enqueued since ($2 the highest id before), as sql/read/get_job.sql reads one.
SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts, run_at,
       locked_at, locked_by, heartbeat_at, last_error, result::text, created_at, finished_at,
       errors::text,
       (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
       metadata::text
FROM {{schema}}.jobs j
WHERE id = ANY($1::bigint[]) OR id > $2
ORDER BY id;
