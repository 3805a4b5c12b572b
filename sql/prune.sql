-- Delete up to $2 finished jobs older than $1 seconds (oldest first), so the
-- pruner never holds long locks or writes a huge WAL burst; returns how many.
-- A done job that still holds its idempotency key (unique_for, job_keys) stays
-- until its window is over. The keys and ticks of the deleted jobs go with them
-- (a key row an enqueue has locked is left: that enqueue points it elsewhere).
WITH gone AS (
    DELETE FROM {{schema}}.jobs
    WHERE id IN (
        SELECT j.id
        FROM {{schema}}.jobs j
        WHERE j.status IN ('done', 'failed', 'cancelled')
          AND j.finished_at < now() - make_interval(secs => $1)
          AND NOT EXISTS (
              SELECT FROM {{schema}}.job_keys r
              WHERE r.job_id = j.id AND j.status = 'done'
                AND j.finished_at + r.unique_for > now())
        ORDER BY j.finished_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id
), keys_gone AS (
    DELETE FROM {{schema}}.job_keys
    WHERE key IN (
        SELECT r.key FROM {{schema}}.job_keys r
        WHERE r.job_id IN (SELECT id FROM gone)
        FOR UPDATE SKIP LOCKED
    )
), ticks_gone AS (
    DELETE FROM {{schema}}.periodic_ticks WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone;
