-- What a worker's claims need to know of its queues $1, in one statement (one
-- transaction per refresh, not two: pauses.py reads it every half poll interval):
-- the paused ones and those with limits (claimed through dequeue_limited.sql; the
-- others through the plain dequeue, which never reads the queues table). Both sorted.
SELECT coalesce(array_agg(queue ORDER BY queue) FILTER (WHERE paused), '{}') AS paused,
       coalesce(array_agg(queue ORDER BY queue) FILTER (
           WHERE concurrency IS NOT NULL OR rate IS NOT NULL OR key_concurrency IS NOT NULL
       ), '{}') AS limited
FROM {{schema}}.queues
WHERE queue = ANY($1::text[]);
