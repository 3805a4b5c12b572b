SELECT id, run_at, created_at
FROM {{schema}}.jobs
WHERE idempotency_key = $1 AND status IN ('pending', 'running');
