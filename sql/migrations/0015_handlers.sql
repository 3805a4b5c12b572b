-- aiopgq schema, version 15: what handlers can do (job context, progress and
-- checkpoints, snooze and abort, results you can await).
--
-- One nullable column without a default, `metadata`: adding it rewrites no row, and a
-- job that uses none of these features stores nothing (a NULL costs a bit in the null
-- bitmap every row already has). One column, not one per key: every column of the
-- table costs each insert and each claim some server instructions, whether it holds
-- anything or not, and five would cost five times one. Its keys, each absent until used:
--   progress    the fraction a handler last reported (ctx.progress), 0..1
--   checkpoint  the state it reported with it; a later run gets it as ctx.checkpoint
--   history     its snoozes and aborts, oldest first, the last 20: objects {"event":
--               "snooze" | "abort", "at": epoch seconds, "attempt": n, "worker": id,
--               "seconds": s (snooze), "reason": text (abort), "over_limit": true (a
--               snooze past the task's max_snoozes, counted as a failed attempt)}
--   snoozes     how many times it snoozed, bounded by the task's max_snoozes
--   waited      true: someone awaits its end (queue.result(), job.wait()). The
--               statements that end a job announce it on the done channel (payload:
--               the job id) for these rows only; never cleared.
ALTER TABLE {{schema}}.jobs ADD COLUMN metadata jsonb;

-- `metadata` with the progress and checkpoint a handler reported (NULL: keep the saved
-- one): the heartbeat, the outcome, and ctx.transaction() save them the same way.
CREATE FUNCTION {{schema}}.with_progress(metadata jsonb, progress float8, checkpoint jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(with_progress.metadata, '{}'::jsonb)
        || CASE WHEN with_progress.progress IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('progress', with_progress.progress) END
        || CASE WHEN with_progress.checkpoint IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('checkpoint', with_progress.checkpoint) END;
$$;

-- `metadata` with `entry` appended to its history, keeping the last 20 entries (NULL:
-- unchanged).
CREATE FUNCTION {{schema}}.push_history(metadata jsonb, entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN push_history.entry IS NULL THEN push_history.metadata
    ELSE coalesce(push_history.metadata, '{}'::jsonb) || jsonb_build_object('history', (
        SELECT jsonb_agg(e ORDER BY n)
        FROM jsonb_array_elements(
            coalesce(push_history.metadata->'history', '[]'::jsonb)
            || jsonb_build_array(push_history.entry)) WITH ORDINALITY AS t(e, n)
        WHERE n > jsonb_array_length(coalesce(push_history.metadata->'history', '[]'::jsonb))
                  - 19))
    END;
$$;

-- How many times the job snoozed.
CREATE FUNCTION {{schema}}.snoozes(metadata jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce((snoozes.metadata->>'snoozes')::integer, 0);
$$;
