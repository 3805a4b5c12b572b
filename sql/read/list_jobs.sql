-- The newest jobs of status $1, queue $2 and task $3 (NULL: any) with an id below $5
-- (NULL: any; the next page), at most $4, in the columns of get_job.sql, from jobs and
-- jobs_archive (the partitioned layout's finished jobs). For operators (`aiopgq jobs`,
-- the dashboard): each table is read in id order, newest first, and merged up to the
-- limit.
-- $6 (NULL: whole) cuts the payload, result and metadata texts to that many characters
-- and adds their full sizes in bytes: the dashboard and CLI render at most that much.
SELECT * FROM (
    (SELECT id, queue, task, status::text, priority, attempts, max_attempts, run_at, locked_at,
            locked_by, heartbeat_at, last_error, created_at, finished_at, errors::text, concurrency_key,
            (SELECT t.tick FROM {{schema}}.periodic_ticks t WHERE t.job_id = j.id) AS tick,
            CASE WHEN $6::int IS NULL THEN payload::text ELSE left(payload::text, $6::int) END AS payload,
            CASE WHEN $6::int IS NULL THEN result::text ELSE left(result::text, $6::int) END AS result,
            CASE WHEN $6::int IS NULL THEN metadata::text ELSE left(metadata::text, $6::int) END AS metadata,
            CASE WHEN $6::int IS NOT NULL THEN octet_length(payload::text) END AS payload_bytes,
            CASE WHEN $6::int IS NOT NULL THEN octet_length(result::text) END AS result_bytes,
            CASE WHEN $6::int IS NOT NULL THEN octet_length(metadata::text) END AS metadata_bytes
     FROM {{schema}}.jobs j
     WHERE ($1::text IS NULL OR status = $1::text::{{schema}}.job_status)
       AND ($2::text IS NULL OR queue = $2::text) AND ($3::text IS NULL OR task = $3::text)
       AND ($5::bigint IS NULL OR id < $5::bigint)
     ORDER BY id DESC
     LIMIT $4)
    UNION ALL
    (SELECT id, queue, task, status::text, priority, attempts, max_attempts, run_at, locked_at,
            locked_by, heartbeat_at, last_error, created_at, finished_at, errors::text, concurrency_key,
            NULL::timestamptz AS tick,
            CASE WHEN $6::int IS NULL THEN payload::text ELSE left(payload::text, $6::int) END AS payload,
            CASE WHEN $6::int IS NULL THEN result::text ELSE left(result::text, $6::int) END AS result,
            CASE WHEN $6::int IS NULL THEN metadata::text ELSE left(metadata::text, $6::int) END AS metadata,
            CASE WHEN $6::int IS NOT NULL THEN octet_length(payload::text) END AS payload_bytes,
            CASE WHEN $6::int IS NOT NULL THEN octet_length(result::text) END AS result_bytes,
            CASE WHEN $6::int IS NOT NULL THEN octet_length(metadata::text) END AS metadata_bytes
     FROM {{schema}}.jobs_archive
     WHERE ($1::text IS NULL OR status = $1::text::{{schema}}.job_status)
       AND ($2::text IS NULL OR queue = $2::text) AND ($3::text IS NULL OR task = $3::text)
       AND ($5::bigint IS NULL OR id < $5::bigint)
     ORDER BY id DESC
     LIMIT $4)
) AS both_tables
ORDER BY id DESC
LIMIT $4;
