-- Make suspended jobs pending ahead of their wake time (migrations/0028_job_timers.sql):
-- up to $2 waiting jobs whose timer is due within $1 seconds become pending at run_at =
-- their wake time, so the claim takes them at that time (a poll interval at most after
-- it, as any job scheduled for later), and their timers go. A job locked meanwhile (its
-- cancel, an emit that wakes it) is skipped: the next pass sees it. The timer of a job
-- that no longer waits at that time (cancelled, woken by its event, pruned) is deleted
-- once it is $1 seconds past: no suspension writes a timer that near, so none is being
-- rewritten meanwhile (sleep_job.sql). Returns (woken, timers deleted).
WITH due AS (
    SELECT t.job_id, t.due_at
    FROM {{schema}}.job_timers t
    WHERE t.due_at <= now() + make_interval(secs => $1::float8)
    ORDER BY t.due_at
    LIMIT $2
), held AS (
    SELECT j.id
    FROM {{schema}}.jobs j
    JOIN due d ON d.job_id = j.id
    WHERE j.status = 'waiting' AND j.run_at = d.due_at
    FOR NO KEY UPDATE OF j SKIP LOCKED
), woke AS (
    UPDATE {{schema}}.jobs j
    SET status = 'pending'
    FROM held h
    WHERE j.id = h.id
    RETURNING j.id
), gone AS (
    DELETE FROM {{schema}}.job_timers t
    USING due d
    WHERE t.job_id = d.job_id AND t.due_at = d.due_at
      AND (t.job_id IN (SELECT h.id FROM held h)
           OR (t.due_at < now() - make_interval(secs => $1::float8)
               AND NOT EXISTS (SELECT FROM {{schema}}.jobs j
                               WHERE j.id = t.job_id AND j.status = 'waiting'
                                 AND j.run_at = t.due_at)))
    RETURNING 1
)
SELECT (SELECT count(*) FROM woke) AS woken, (SELECT count(*) FROM gone) AS deleted;
