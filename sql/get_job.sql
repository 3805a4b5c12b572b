-- One job by id: in jobs, else in jobs_archive (the partitioned layout moves finished
-- jobs there; in the plain layout the archive has no partitions and costs nothing).
-- One statement, one snapshot: a job being moved is seen in exactly one of the two. A
-- periodic job's tick goes with it when it is archived (as when it is pruned).
(SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts, run_at,
        locked_at, locked_by, heartbeat_at, last_error, result::text, created_at, finished_at,
        errors::text,
        (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
        metadata::text
 FROM {{schema}}.jobs j
 WHERE id = $1)
UNION ALL
(SELECT id, queue, task, payload::text, status::text, priority, attempts, max_attempts, run_at,
        locked_at, locked_by, heartbeat_at, last_error, result::text, created_at, finished_at,
        errors::text, NULL::timestamptz AS tick, metadata::text
 FROM {{schema}}.jobs_archive
 WHERE id = $1)
LIMIT 1;
