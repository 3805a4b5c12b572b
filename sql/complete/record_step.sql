-- Record a step that returned (ctx.step): $1 job, $2 attempt, $3 worker (the lease),
-- $4 position, $5 name, $6 result (JSON text or NULL), $7 when the step started (epoch
-- seconds). Run alone for a step without database work (by a task started when the step
-- returns; a step that was the handler's last action goes with the job's done instead,
-- sql/complete/complete_special.sql), or as the last statement of the step's
-- ctx.transaction(), so that its work and this row commit together. Fenced:
-- nothing is written unless this run still holds the job. ON CONFLICT DO NOTHING: a row
-- another run of the job recorded at this position or with this name wins (the INSERT
-- waits for that run's commit first); no row comes back, and the caller rolls its own
-- step back and replays the recorded value (sql/functions/steps.sql).
INSERT INTO {{schema}}.job_steps (job_id, "position", name, kind, result, attempt, started_at)
SELECT j.id, $4::int, $5::text, 'step', $6::text::jsonb, j.attempts, to_timestamp($7::float8)
FROM {{schema}}.jobs j
WHERE j.id = $1 AND j.attempts = $2 AND j.locked_by = $3 AND j.status = 'running'
ON CONFLICT DO NOTHING
RETURNING "position";
