-- A job's recorded steps for `aiopgq job` and the dashboard: name, kind, the attempt that
-- recorded it, when it started and finished (epoch seconds), in order; then, in
-- job_wait.sql, what the job waits for.
SELECT "position", name, kind, attempt, date_part('epoch', started_at) AS started,
       date_part('epoch', finished_at) AS finished,
       CASE WHEN kind = 'sleep' THEN (result->>'until')::float8 END AS until
FROM {{schema}}.job_steps
WHERE job_id = $1
ORDER BY "position";
