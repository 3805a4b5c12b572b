-- The functions now come from sql/functions/, applied after the numbered migrations:
-- drop what that leaves behind. grant_producer and grant_worker are full definitions
-- there, so the chain of older ones they called goes; enqueue() takes a concurrency_key
-- as its last argument, a new signature, so the one without it goes (EXECUTE on enqueue
-- is PUBLIC's, so no role loses a grant).
DROP FUNCTION IF EXISTS {{schema}}.grant_producer_before_16(name);
DROP FUNCTION IF EXISTS {{schema}}.grant_producer_before_20(name);
DROP FUNCTION IF EXISTS {{schema}}.grant_worker_before_16(name);
DROP FUNCTION IF EXISTS {{schema}}.grant_worker_before_18(name);
DROP FUNCTION IF EXISTS {{schema}}.enqueue(text, jsonb, text, timestamptz, integer, integer,
    text, interval, text);
