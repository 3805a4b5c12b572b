-- Put a job to sleep (ctx.sleep, ctx.sleep_until) and record the sleep as its step at
-- $4, in one statement: $1 job, $2 attempt, $3 worker (the lease), $5 name, $6 the wake
-- time in epoch seconds (NULL: now + $7 seconds, by the database's clock), $8 when the
-- run started the sleep (epoch seconds), $9 progress, $10 checkpoint (JSON text; NULL
-- keeps the saved one). The job goes back to pending at its wake time with its lease
-- ended and its attempt not counted (a sleep is not a failure, and is not a snooze: it
-- does not count against max_snoozes). A sleep replayed before its time (the job ran
-- early: an operator's retry) keeps its recorded wake time: the caller passes it as $6
-- and the INSERT finds the row there. Returns the wake time; no row when this run no
-- longer holds the job. Pending with a future run_at, as retries and snoozes are: the
-- claim's index walks such rows (figures in docs/durable-steps.md).
WITH slept AS (
    UPDATE {{schema}}.jobs j
    SET status = 'pending',
        run_at = coalesce(to_timestamp($6::float8), now() + make_interval(secs => $7::float8)),
        attempts = j.attempts - 1,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL,
        metadata = CASE WHEN $9::float8 IS NULL AND $10::text IS NULL THEN j.metadata
                        ELSE {{schema}}.with_progress(j.metadata, $9, $10::text::jsonb) END
    WHERE j.id = $1 AND j.attempts = $2 AND j.locked_by = $3 AND j.status = 'running'
    RETURNING j.id, j.run_at
), recorded AS (
    INSERT INTO {{schema}}.job_steps (job_id, "position", name, kind, result, attempt,
                                      started_at)
    SELECT s.id, $4::int, $5::text, 'sleep',
           jsonb_build_object('until', date_part('epoch', s.run_at)), $2::int,
           to_timestamp($8::float8)
    FROM slept s
    ON CONFLICT DO NOTHING
)
SELECT date_part('epoch', run_at) FROM slept;
