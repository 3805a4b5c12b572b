-- The one summary of the queues, for every view (Queue.queue_stats and status, `aiopgq
-- status` and `top`, the dashboard, the workers' /metrics). Per queue: jobs runnable
-- now, scheduled for later, running and waiting for their parents (depends_on), with the mean progress of the running ones
-- that report it; the jobs that arrived and that finished done, failed or cancelled in
-- the last $1 seconds; the age of the oldest runnable job; whether the queue is paused.
-- Every known queue has a row, with zeros when idle: those with such jobs, a row in the
-- queues table (settings, pause) or a task a worker registered
-- (sql/workers/register_tasks.sql).
--
-- With a window it reads the partial indexes only (pending rows, rows with a lease,
-- recently finished rows), never the whole table: cheap enough to poll every second. A
-- job created in the window is pending, running, waiting or finished in the window, so
-- the arrivals come from the same scans. Waiting jobs are found through their open
-- edges (job_dependencies_open_idx: a waiting job has a parent not finished yet), one
-- probe of jobs_pkey per child, as no index of jobs holds them. $1 NULL: the window is everything retained,
-- the archive of the partitioned layout included (a scan of every finished row).
WITH since AS (
    SELECT CASE WHEN $1::float8 IS NULL THEN '-infinity'::timestamptz
                ELSE now() - make_interval(secs => $1::float8) END AS at
), recent AS (
    SELECT queue, status, run_at, created_at, NULL::float8 AS progress
    FROM {{schema}}.jobs WHERE status = 'pending'
    UNION ALL
    -- Every claimed row has a lease (heartbeat_at): jobs_running_idx.
    SELECT queue, status, run_at, created_at, (metadata->>'progress')::float8
    FROM {{schema}}.jobs WHERE heartbeat_at IS NOT NULL
    UNION ALL
    SELECT queue, status, run_at, created_at, NULL
    FROM {{schema}}.jobs
    WHERE status IN ('done', 'failed', 'cancelled') AND finished_at > (SELECT at FROM since)
    UNION ALL
    SELECT w.queue, w.status, w.run_at, w.created_at, NULL
    FROM (SELECT DISTINCT d.child_id FROM {{schema}}.job_dependencies d
          WHERE d.outcome IS NULL) AS c,
         LATERAL (SELECT j.queue, j.status, j.run_at, j.created_at FROM {{schema}}.jobs j
                  WHERE j.id = c.child_id AND j.status = 'waiting' OFFSET 0) AS w
    UNION ALL
    SELECT queue, status, run_at, created_at, NULL
    FROM {{schema}}.jobs_archive
    WHERE finished_at > (SELECT at FROM since)
), per_queue AS (
    SELECT queue,
           count(*) FILTER (WHERE status = 'pending' AND run_at <= now()) AS runnable,
           count(*) FILTER (WHERE status = 'pending' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'waiting') AS waiting,
           count(*) FILTER (WHERE created_at > (SELECT at FROM since)) AS arrived,
           count(*) FILTER (WHERE status = 'done') AS done,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
           extract(epoch FROM now() - min(run_at) FILTER (
               WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_runnable_age,
           avg(progress) FILTER (WHERE status = 'running') AS progress
    FROM recent
    GROUP BY queue
), known AS (
    -- Two small tables, not the jobs: an idle queue costs nothing to list.
    SELECT queue, coalesce(q.paused, false) AS paused
    FROM {{schema}}.queues q
    FULL JOIN (SELECT DISTINCT t.queue FROM {{schema}}.tasks t) AS t USING (queue)
)
SELECT queue,
       coalesce(p.runnable, 0) AS runnable, coalesce(p.scheduled, 0) AS scheduled,
       coalesce(p.running, 0) AS running, coalesce(p.waiting, 0) AS waiting,
       coalesce(p.arrived, 0) AS arrived,
       coalesce(p.done, 0) AS done, coalesce(p.failed, 0) AS failed,
       coalesce(p.cancelled, 0) AS cancelled, p.oldest_runnable_age, p.progress,
       coalesce(k.paused, false) AS paused
FROM per_queue p
FULL JOIN known k USING (queue)
ORDER BY 1;
