-- The $1 jobs that failed last, newest first, in the columns of get_job.sql: for live
-- views (the dashboard polls it). In jobs, read backwards through the index of
-- finished jobs by (status, finished_at) -- the literals prove its predicate -- so it
-- stops after $1 rows whatever the number of done jobs; in the archive (the
-- partitioned layout), through the failed partitions' id index.
-- $2 (NULL: whole) cuts the payload, result and metadata texts to that many characters
-- and adds their full sizes in bytes: the dashboard and CLI render at most that much.
SELECT * FROM (
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
     WHERE status = 'failed' AND status IN ('done', 'failed', 'cancelled')
     ORDER BY finished_at DESC
     LIMIT $1)
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
     WHERE status = 'failed'
     ORDER BY id DESC
     LIMIT $1)
) AS both_tables
ORDER BY finished_at DESC
LIMIT $1;
