-- The steps a job's earlier runs recorded, in order, for ctx.step's replay: read once per
-- run, at its first step (aiopgq/_steps.py).
SELECT "position", name, kind, result::text
FROM {{schema}}.job_steps
WHERE job_id = $1
ORDER BY "position";
