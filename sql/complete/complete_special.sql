-- Outcomes that carry more than complete_done.sql and complete_error.sql write: a
-- snooze, an abort, or any outcome of a job that reported progress (which is saved
-- with it, so nothing reported is lost). Plain outcomes never come here.
--   $1 ids, $2 attempts (lease tokens), $3 kinds: 'done' | 'error' | 'snooze',
--   $4 results (JSON text, done), $5 delays in seconds (error: the retry's backoff;
--   snooze: the snooze), $6 errors (error; for a snooze, the text recorded if it is
--   over the limit), $7 final (error: no retry, e.g. an abort), $8 progress, $9 states
--   (JSON text; NULL keeps the saved one), $10 history entries (JSON text or NULL),
--   $11 max_snoozes (snooze), $12 worker id; $13-$17 the durable steps that were the
--   last action of a handler that returned (ctx.step, aiopgq/_steps.py): job ids,
--   positions, names, results (JSON text), start times (epoch seconds).
-- A snooze within the task's max_snoozes puts the job back without counting its
-- attempt; past it, the snooze counts as a failed attempt (retried after its seconds,
-- or failed at max_attempts), so a job that snoozes forever still ends. Every
-- expression reads the row as it was (snoozes(j.metadata) is the count before this one).
-- An error (an abort, or a snooze over the limit) joins the job's error history as in
-- complete_error.sql. Returns each job's new status and run_at (retry times wake the
-- fetcher), and announces finished jobs someone awaits (complete_done.sql); a finished
-- job others depend on settles its children (sql/functions/dependencies.sql). A last
-- step's row is written with its job's done, only for a job this worker still held (as
-- sql/complete/record_step.sql would have written it alone, one statement earlier).
WITH ended AS (
UPDATE {{schema}}.jobs j
SET status = CASE
        WHEN o.kind = 'done' THEN 'done'::{{schema}}.job_status
        WHEN o.kind = 'snooze' AND {{schema}}.snoozes(j.metadata) < o.max_snoozes
            THEN 'pending'::{{schema}}.job_status
        WHEN o.final OR j.attempts >= j.max_attempts THEN 'failed'::{{schema}}.job_status
        ELSE 'pending'::{{schema}}.job_status END,
    attempts = CASE
        WHEN o.kind = 'snooze' AND {{schema}}.snoozes(j.metadata) < o.max_snoozes
            THEN j.attempts - 1
        ELSE j.attempts END,
    run_at = CASE
        WHEN o.kind = 'done' THEN j.run_at
        WHEN o.kind = 'snooze' AND {{schema}}.snoozes(j.metadata) < o.max_snoozes
            THEN now() + make_interval(secs => o.delay)
        WHEN o.final OR j.attempts >= j.max_attempts THEN j.run_at
        ELSE now() + make_interval(secs => o.delay) END,
    finished_at = CASE
        WHEN o.kind = 'done' THEN now()
        WHEN o.kind = 'snooze' AND {{schema}}.snoozes(j.metadata) < o.max_snoozes THEN NULL
        WHEN o.final OR j.attempts >= j.max_attempts THEN now() END,
    result = CASE WHEN o.kind = 'done' THEN o.result::jsonb ELSE j.result END,
    last_error = CASE
        WHEN o.kind = 'error' THEN o.error
        WHEN o.kind = 'snooze' AND {{schema}}.snoozes(j.metadata) >= o.max_snoozes
            THEN o.error
        ELSE j.last_error END,
    errors = CASE
        WHEN o.kind = 'error'
          OR (o.kind = 'snooze' AND {{schema}}.snoozes(j.metadata) >= o.max_snoozes)
            THEN {{schema}}.push_error(j.errors, jsonb_build_object(
                'at', extract(epoch FROM now()), 'attempt', j.attempts, 'worker', $12::text,
                'error', o.error))
        ELSE j.errors END,
    metadata = {{schema}}.push_history(
        {{schema}}.with_progress(j.metadata, o.progress, o.state::jsonb)
            || CASE WHEN o.kind = 'snooze'
                    THEN jsonb_build_object('snoozes', {{schema}}.snoozes(j.metadata) + 1)
                    ELSE '{}'::jsonb END,
        o.event::jsonb || jsonb_build_object(
            'at', extract(epoch FROM now()), 'attempt', j.attempts, 'worker', $12::text)
        || CASE WHEN o.kind = 'snooze' AND {{schema}}.snoozes(j.metadata) >= o.max_snoozes
                THEN '{"over_limit": true}'::jsonb ELSE '{}'::jsonb END),
    locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::float8[], $6::text[],
            $7::bool[], $8::float8[], $9::text[], $10::text[], $11::int[])
    AS o(id, attempt, kind, result, delay, error, final, progress, state, event, max_snoozes)
WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $12
RETURNING j.id, j.status::text AS status, j.run_at,
    CASE WHEN j.metadata ? 'waited' AND j.status <> 'pending'
         THEN pg_notify({{done_channel}}, j.id::text) END AS notified,
    CASE WHEN j.metadata ? 'dependents' AND j.status <> 'pending' THEN j.id END AS parent,
    j.result, j.attempts
), stepped AS (
    INSERT INTO {{schema}}.job_steps (job_id, "position", name, kind, result, attempt, started_at)
    SELECT e.id, s.position, s.name, 'step', s.result::jsonb, e.attempts,
           to_timestamp(s.started)
    FROM unnest($13::bigint[], $14::int[], $15::text[], $16::text[], $17::float8[])
        AS s(id, position, name, result, started)
    JOIN ended e ON e.id = s.id
    ON CONFLICT DO NOTHING
), settled AS (
    SELECT {{schema}}.settle_dependents(array_agg(parent), array_agg(status), array_agg(result))
    FROM ended WHERE parent IS NOT NULL
)
SELECT e.id, e.status, e.run_at, e.notified FROM ended e, settled;
