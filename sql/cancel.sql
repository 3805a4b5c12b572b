-- Cancel a job that has not started. A running job is left alone (returns no row).
UPDATE {{schema}}.jobs
SET status = 'cancelled', finished_at = now()
WHERE id = $1 AND status = 'pending'
RETURNING id, task, queue;
