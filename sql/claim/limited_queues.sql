-- Which of the queues $1 have limits (claimed through dequeue_limited.sql; the
-- others through the plain dequeue, which never reads the queues table).
SELECT coalesce(array_agg(queue ORDER BY queue), '{}')
FROM {{schema}}.queues
WHERE queue = ANY($1::text[])
  AND (concurrency IS NOT NULL OR rate IS NOT NULL OR key_concurrency IS NOT NULL);
