-- aiopgq.testing.run_jobs, before the run: the highest job id so far, and the unfinished
-- jobs with their attempts (a job ran during the run when its attempts grew).
SELECT coalesce(max(id), 0) AS last_id,
       coalesce(array_agg(id) FILTER (WHERE status IN ('pending', 'running', 'waiting')), '{}') AS ids,
       coalesce(array_agg(attempts) FILTER (WHERE status IN ('pending', 'running', 'waiting')), '{}')
           AS attempts
FROM {{schema}}.jobs;
