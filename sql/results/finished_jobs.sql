-- Waiters: of the jobs $1, those that have ended (done, failed, cancelled), as rows of
-- get_job.sql (from jobs, else from jobs_archive: the partitioned layout moves finished
-- jobs there); the ids no job has (never enqueued, or pruned), with NULL columns; and
-- the unfinished jobs not marked `waited` yet (watch_jobs.sql skipped them), with
-- `unmarked` true.
SELECT w.id AS wanted, j.status IN ('pending', 'running', 'waiting') AS unmarked,
       j.id, j.queue, j.task, j.payload, j.status::text, j.priority,
       j.attempts, j.max_attempts, j.run_at, j.locked_at, j.locked_by, j.heartbeat_at,
       j.last_error, j.result, j.created_at, j.finished_at, j.errors, j.tick,
       j.metadata::text, j.concurrency_key
FROM unnest($1::bigint[]) AS w(id)
LEFT JOIN LATERAL (
    (SELECT a.id, a.queue, a.task, a.payload::text, a.status, a.priority, a.attempts,
            a.max_attempts, a.run_at, a.locked_at, a.locked_by, a.heartbeat_at, a.last_error,
            a.result::text, a.created_at, a.finished_at, a.errors::text,
            (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = a.id) AS tick,
            a.metadata, a.concurrency_key
     FROM {{schema}}.jobs a
     WHERE a.id = w.id)
    UNION ALL
    (SELECT b.id, b.queue, b.task, b.payload::text, b.status, b.priority, b.attempts,
            b.max_attempts, b.run_at, b.locked_at, b.locked_by, b.heartbeat_at, b.last_error,
            b.result::text, b.created_at, b.finished_at, b.errors::text, NULL::timestamptz,
            b.metadata, b.concurrency_key
     FROM {{schema}}.jobs_archive b
     WHERE b.id = w.id)
    LIMIT 1
) AS j ON true
WHERE j.id IS NULL OR j.status IN ('done', 'failed', 'cancelled')
   OR (j.metadata ? 'waited') IS NOT TRUE;
