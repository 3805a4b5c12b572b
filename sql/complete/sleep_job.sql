-- Put a job to sleep (ctx.sleep, ctx.sleep_until) and record the sleep as its step at
-- $4, in one statement: $1 job, $2 attempt, $3 worker (the lease), $5 name, $6 the wake
-- time in epoch seconds (NULL: now + $7 seconds, by the database's clock), $8 when the
-- run started the sleep (epoch seconds), $9 progress, $10 checkpoint (JSON text; NULL
-- keeps the saved one). Its lease ends and its attempt is not counted (a sleep is not a
-- failure, and is not a snooze: it does not count against max_snoozes); run_at is its
-- wake time. A sleep replayed before its time (the job ran early: an operator's retry)
-- keeps its recorded wake time: the caller passes it as $6 and the INSERT finds the row
-- there. Returns the wake time; no row when this run no longer holds the job.
-- Where it waits (migrations/0028_job_timers.sql): more than 60 seconds ahead, in status
-- 'waiting' with a timer row, off the claim's index, until the maintenance leader makes
-- it pending ahead of its time (promote_timers.sql); nearer, or with an idempotency key
-- (only pending and running jobs hold keys), pending at its wake time as retries wait.
-- The timer row is written or deleted here either way, so a stale one from an earlier
-- suspension never outlives the next.
WITH wake AS (
    SELECT coalesce(to_timestamp($6::float8), now() + make_interval(secs => $7::float8)) AS at
), slept AS (
    UPDATE {{schema}}.jobs j
    SET status = CASE WHEN w.at > now() + interval '60 seconds' AND j.idempotency_key IS NULL
                      THEN 'waiting' ELSE 'pending' END::{{schema}}.job_status,
        run_at = w.at,
        attempts = j.attempts - 1,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL,
        metadata = CASE WHEN $9::float8 IS NULL AND $10::text IS NULL THEN j.metadata
                        ELSE {{schema}}.with_progress(j.metadata, $9, $10::text::jsonb) END
    FROM wake w
    WHERE j.id = $1 AND j.attempts = $2 AND j.locked_by = $3 AND j.status = 'running'
    RETURNING j.id, j.run_at, j.status
), recorded AS (
    INSERT INTO {{schema}}.job_steps (job_id, "position", name, kind, result, attempt,
                                      started_at)
    SELECT s.id, $4::int, $5::text, 'sleep',
           jsonb_build_object('until', date_part('epoch', s.run_at)), $2::int,
           to_timestamp($8::float8)
    FROM slept s
    ON CONFLICT DO NOTHING
), timed AS (
    INSERT INTO {{schema}}.job_timers AS t (job_id, due_at)
    SELECT s.id, s.run_at FROM slept s WHERE s.status = 'waiting'
    ON CONFLICT ON CONSTRAINT job_timers_pkey DO UPDATE SET due_at = EXCLUDED.due_at
), untimed AS (
    DELETE FROM {{schema}}.job_timers t
    USING slept s
    WHERE t.job_id = s.id AND s.status <> 'waiting'
)
SELECT date_part('epoch', run_at) FROM slept;
