-- Delete up to $3 jobs of status $1 ('done', 'failed' or 'cancelled') that finished
-- more than $2 seconds ago, oldest first, so the pruner never holds long locks or
-- writes a huge WAL burst; returns how many. The IN list proves the partial index's
-- predicate for a generic plan too (status = $1 alone cannot); the index leads with
-- the status. A done job that still holds its idempotency key (unique_for, job_keys)
-- stays until its window is over. The key rows and ticks of the deleted jobs go with
-- them (a key row that an enqueue has locked is left: that enqueue repoints it), and so
-- do their edges to their parents (job_dependencies, kept by child), their durable
-- steps and waits (job_steps, job_waits: migrations/0027_durable_steps.sql) and the rows
-- of the sequences they ended (an enqueue that holds such a row has repointed it when
-- the DELETE re-reads it); a done member of a workflow group leaves its result in
-- workflow_jobs. A failed job of a sequence that holds a waiting job stays
-- until it is retried or cancelled, and so does a cancelled job a sequence names as its
-- newest (sql/functions/sequences.sql).
WITH gone AS (
    DELETE FROM {{schema}}.jobs
    WHERE id IN (
        SELECT j.id
        FROM {{schema}}.jobs j
        WHERE j.status = $1::text::{{schema}}.job_status
          AND j.status IN ('done', 'failed', 'cancelled')
          AND j.finished_at < now() - make_interval(secs => $2)
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
    RETURNING id, idempotency_key,
        CASE WHEN metadata ? 'group' AND status = 'done' THEN result END AS member_result,
        metadata ? 'group' AND status = 'done' AS done_member
), results_kept AS (
    -- A workflow group's member done by the hot path has its result only in its jobs
    -- row: kept for its group's dependents (sql/read/parent_results.sql).
    UPDATE {{schema}}.workflow_jobs m
    SET outcome = 'done', result = g.member_result
    FROM gone g
    WHERE g.done_member AND m.job_id = g.id AND m.outcome IS NULL
), keys_gone AS (
    DELETE FROM {{schema}}.job_keys
    WHERE key IN (
        SELECT r.key FROM {{schema}}.job_keys r JOIN gone g ON r.key = g.idempotency_key
        WHERE r.job_id = g.id
        FOR UPDATE OF r SKIP LOCKED
    )
), ticks_gone AS (
    DELETE FROM {{schema}}.periodic_ticks WHERE job_id IN (SELECT id FROM gone)
), edges_gone AS (
    DELETE FROM {{schema}}.job_dependencies WHERE child_id IN (SELECT id FROM gone)
), sequences_gone AS (
    DELETE FROM {{schema}}.sequences WHERE last_job_id IN (SELECT id FROM gone)
), steps_gone AS (
    DELETE FROM {{schema}}.job_steps WHERE job_id IN (SELECT id FROM gone)
), waits_gone AS (
    DELETE FROM {{schema}}.job_waits WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone;
