-- Take the ticks of one schedule and enqueue them (sql/functions/take_ticks.sql):
-- $1 name, $2 the last tick as read, $3 the new last tick, $4 worker id, $5 queue,
-- $6 priority, $7 max_attempts, $8 the ticks to enqueue, $9 their payloads (JSON text).
SELECT taken, ids
FROM {{schema}}.take_ticks($1, $2, $3, $4, $5, $6, $7, $8::timestamptz[], $9::text[]);
