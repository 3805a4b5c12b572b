-- The limits of queue $1 (no row: none).
SELECT queue, concurrency, rate, burst, key_concurrency
FROM {{schema}}.queues
WHERE queue = $1;
