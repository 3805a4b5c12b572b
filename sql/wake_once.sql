-- The wake-up decision for a batch of queue $1 due at $2 (NULL = now), made before
-- its rows are inserted in the same transaction (see migrations/0004_wake_per_row.sql).
SELECT {{schema}}.wake_once($1, coalesce($2::timestamptz, now()));
