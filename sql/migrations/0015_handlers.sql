-- aiopgq schema, version 15: what handlers can do (job context, progress and
-- checkpoints, snooze and abort, results you can await).
--
-- Every column is nullable without a default: adding them rewrites no row, rows that
-- never use a feature store nothing (a NULL costs a bit in the null bitmap every row
-- already has), and the plain claim, heartbeat and completion statements neither
-- write nor read them (the completions read `waited`, see below).
ALTER TABLE {{schema}}.jobs
    -- ctx.progress(fraction, state=...): the fraction last reported (0..1) and the
    -- state, written by the worker's next heartbeat and with the job's outcome; a
    -- later run of the job gets the state back as ctx.checkpoint.
    ADD COLUMN progress float8,
    ADD COLUMN checkpoint jsonb,
    -- Snoozes and aborts, oldest first, the last 20 (push_history below): objects
    -- {"event": "snooze" | "abort", "at": epoch seconds, "attempt": n, "worker": id,
    --  "seconds": s (snooze), "reason": text (abort), "over_limit": true (a snooze
    --  past the task's max_snoozes, counted as a failed attempt)}.
    ADD COLUMN history jsonb,
    -- How many times the job snoozed (NULL: never); bounded by the task's max_snoozes.
    ADD COLUMN snoozes integer,
    -- Someone awaits the job's end (queue.result(), job.wait()): the statements that
    -- finish a job send a NOTIFY on the schema's done channel, payload the job id,
    -- for these rows only. Set by the waiter, never cleared.
    ADD COLUMN waited boolean;

-- `history` with `entry` appended, keeping the last 20 entries.
CREATE FUNCTION {{schema}}.push_history(history jsonb, entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_array_length(all_entries) <= 20 THEN all_entries
        ELSE (SELECT jsonb_agg(e ORDER BY n)
              FROM jsonb_array_elements(all_entries) WITH ORDINALITY AS t(e, n)
              WHERE n > jsonb_array_length(all_entries) - 20)
    END
    FROM (SELECT coalesce(push_history.history, '[]'::jsonb) || jsonb_build_array(push_history.entry))
        AS s(all_entries);
$$;
