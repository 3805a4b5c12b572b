-- Move up to $3 jobs of status $1 ('done', 'failed' or 'cancelled') that finished more
-- than $2 seconds ago from jobs into jobs_archive, oldest first, in one statement: a
-- reader sees each job in exactly one of the two. Rows that finished before $4 (the
-- start of the status's oldest partition, as text from archive_state.sql: older ones
-- were dropped, so these rows are past their retention and the pruner deletes them)
-- stay, and so does a done job that still holds its idempotency key (unique_for,
-- job_keys: enqueue_unique reads the holder in jobs), as in prune.sql. The key rows and
-- ticks of the moved jobs go, as the pruner's do, and so do their edges to their parents
-- (job_dependencies: a finished child needs them no more), their durable steps and waits
-- (job_steps, job_waits: an archived job runs no more, and a restored one is a finished
-- job), and the rows of the sequences they ended; the jobs of sequences that prune.sql
-- keeps stay here too.
-- SKIP LOCKED: a row an operator is retrying waits for the next pass.
-- The IN list proves the partial index's predicate for a generic plan too.
WITH moved AS (
    DELETE FROM {{schema}}.jobs
    WHERE id IN (
        SELECT j.id
        FROM {{schema}}.jobs j
        WHERE j.status = $1::text::{{schema}}.job_status
          AND j.status IN ('done', 'failed', 'cancelled')
          AND j.finished_at < now() - make_interval(secs => $2)
          AND j.finished_at >= $4::text::timestamptz
          AND NOT (j.status = 'done' AND j.idempotency_key IS NOT NULL AND EXISTS (
              SELECT FROM {{schema}}.job_keys r
              WHERE r.key = j.idempotency_key AND r.job_id = j.id
                AND j.finished_at + r.unique_for > now()))
          AND NOT (j.metadata ? 'sequence' AND j.status IN ('failed', 'cancelled') AND (
              EXISTS (  -- a failed job that holds its sequence (sequences.sql)
                  SELECT FROM {{schema}}.job_dependencies d
                  WHERE j.status = 'failed' AND d.parent_id = j.id AND d.kind <> 'parent'
                    AND (SELECT c.status FROM {{schema}}.jobs c WHERE c.id = d.child_id)
                        = 'waiting')
              OR EXISTS (  -- a cancelled newest job: the next enqueue walks past it
                  SELECT FROM {{schema}}.sequences s
                  WHERE j.status = 'cancelled' AND s.last_job_id = j.id)))
        ORDER BY j.finished_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    )
    RETURNING *
), archived AS (
    INSERT INTO {{schema}}.jobs_archive
    SELECT * FROM moved
), keys_gone AS (
    DELETE FROM {{schema}}.job_keys
    WHERE key IN (
        SELECT r.key FROM {{schema}}.job_keys r JOIN moved m ON r.key = m.idempotency_key
        WHERE r.job_id = m.id
        FOR UPDATE OF r SKIP LOCKED
    )
), ticks_gone AS (
    DELETE FROM {{schema}}.periodic_ticks WHERE job_id IN (SELECT id FROM moved)
), edges_gone AS (
    DELETE FROM {{schema}}.job_dependencies WHERE child_id IN (SELECT id FROM moved)
), sequences_gone AS (
    DELETE FROM {{schema}}.sequences WHERE last_job_id IN (SELECT id FROM moved)
), steps_gone AS (
    DELETE FROM {{schema}}.job_steps WHERE job_id IN (SELECT id FROM moved)
), waits_gone AS (
    DELETE FROM {{schema}}.job_waits WHERE job_id IN (SELECT id FROM moved)
)
SELECT count(*) FROM moved;
