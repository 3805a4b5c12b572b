-- Waiters: of the jobs $1, those that have ended (done, failed, cancelled), as rows of
-- get_job.sql; the ids no job has (never enqueued, or pruned), with NULL columns; and
-- the unfinished jobs not marked `waited` yet (watch_jobs.sql skipped them), with
-- `unmarked` true.
SELECT w.id AS wanted, j.status IN ('pending', 'running') AS unmarked,
       j.id, j.queue, j.task, j.payload::text, j.status::text, j.priority,
       j.attempts, j.max_attempts, j.run_at, j.locked_at, j.locked_by, j.heartbeat_at,
       j.last_error, j.result::text, j.created_at, j.finished_at,
       (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
       j.metadata::text
FROM unnest($1::bigint[]) AS w(id)
LEFT JOIN {{schema}}.jobs j ON j.id = w.id
WHERE j.id IS NULL OR j.status IN ('done', 'failed', 'cancelled')
   OR (j.metadata ? 'waited') IS NOT TRUE;
