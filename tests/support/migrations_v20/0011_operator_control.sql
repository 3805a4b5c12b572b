-- aiopgq schema, version 11: operator control (pause and resume queues, an error
-- history for retrying failed jobs).
--
-- Paused queues. Workers read this flag when they start, when the LISTEN connection
-- (re)connects, on the control NOTIFYs that pause and resume send, and every half
-- poll interval as a fallback; they leave paused queues out of the list their claim
-- reads. The claim statement itself does not look at this table (see
-- aiopgq/_worker/pauses.py). Enqueueing into a paused queue works as always.
ALTER TABLE {{schema}}.queues ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- The errors of a job's failed attempts, oldest first: a JSON array of objects
-- {"at": epoch seconds, "attempt": n, "worker": id or null, "error": text}, at most
-- the last 10 (each error is capped by the worker: aiopgq/_worker/dispatcher.py).
-- last_error stays the latest one. A column, not a table: reading a job stays one
-- index lookup, the pruner deletes a job's history with its row, and a failure
-- writes no second row (its UPDATE rewrites the job's row anyway). NULL until the
-- first failure, so rows that never fail store nothing (no default to write).
ALTER TABLE {{schema}}.jobs ADD COLUMN errors jsonb;

-- `errors` with `entry` appended, keeping the last 10 entries: the one bound, used by
-- every statement that records a failure (complete_error.sql, rescue.sql, retry).
CREATE FUNCTION {{schema}}.push_error(errors jsonb, entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_array_length(all_entries) <= 10 THEN all_entries
        ELSE (SELECT jsonb_agg(e ORDER BY n)
              FROM jsonb_array_elements(all_entries) WITH ORDINALITY AS t(e, n)
              WHERE n > jsonb_array_length(all_entries) - 10)
    END
    FROM (SELECT coalesce(push_error.errors, '[]'::jsonb) || jsonb_build_array(push_error.entry))
        AS s(all_entries);
$$;
