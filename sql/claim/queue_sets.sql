-- What a worker's claims need to know of its queues $1, in one statement (one
-- transaction per refresh, not two: pauses.py reads it every half poll interval):
-- the paused ones and those with limits (claimed through dequeue_limited.sql; the
-- others through the plain dequeue, which never reads the queues table).
WITH args AS (SELECT $1::text[] AS queues)
{{> claim/queue_sets_of.sql}};
