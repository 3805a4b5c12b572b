-- The paused queues, sorted; only those among $1 unless $1 is NULL (a worker asks
-- about its own queues, outside its claim statement).
SELECT coalesce(array_agg(queue ORDER BY queue), '{}')
FROM {{schema}}.queues
WHERE paused AND ($1::text[] IS NULL OR queue = ANY($1::text[]));
