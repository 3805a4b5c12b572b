-- One job by id: in jobs, else in jobs_archive (the partitioned layout moves finished
-- jobs there; in the plain layout the archive has no partitions and costs nothing).
-- One statement, one snapshot: a job being moved is seen in exactly one of the two. A
-- periodic job's tick goes with it when it is archived (as when it is pruned).
-- $2 (NULL: whole) cuts the payload, result and metadata texts to that many characters
-- and adds their full sizes in bytes: the dashboard and CLI render at most that much.
(SELECT id, queue, task, status::text, priority, attempts, max_attempts, run_at, locked_at,
        locked_by, heartbeat_at, last_error, created_at, finished_at, errors::text, concurrency_key,
        (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
        CASE WHEN $2::int IS NULL THEN payload::text ELSE left(payload::text, $2::int) END AS payload,
        CASE WHEN $2::int IS NULL THEN result::text ELSE left(result::text, $2::int) END AS result,
        CASE WHEN $2::int IS NULL THEN metadata::text ELSE left(metadata::text, $2::int) END AS metadata,
        CASE WHEN $2::int IS NOT NULL THEN octet_length(payload::text) END AS payload_bytes,
        CASE WHEN $2::int IS NOT NULL THEN octet_length(result::text) END AS result_bytes,
        CASE WHEN $2::int IS NOT NULL THEN octet_length(metadata::text) END AS metadata_bytes
 FROM {{schema}}.jobs j
 WHERE id = $1)
UNION ALL
(SELECT id, queue, task, status::text, priority, attempts, max_attempts, run_at, locked_at,
        locked_by, heartbeat_at, last_error, created_at, finished_at, errors::text, concurrency_key,
        NULL::timestamptz AS tick,
        CASE WHEN $2::int IS NULL THEN payload::text ELSE left(payload::text, $2::int) END AS payload,
        CASE WHEN $2::int IS NULL THEN result::text ELSE left(result::text, $2::int) END AS result,
        CASE WHEN $2::int IS NULL THEN metadata::text ELSE left(metadata::text, $2::int) END AS metadata,
        CASE WHEN $2::int IS NOT NULL THEN octet_length(payload::text) END AS payload_bytes,
        CASE WHEN $2::int IS NOT NULL THEN octet_length(result::text) END AS result_bytes,
        CASE WHEN $2::int IS NOT NULL THEN octet_length(metadata::text) END AS metadata_bytes
 FROM {{schema}}.jobs_archive
 WHERE id = $1)
LIMIT 1;
