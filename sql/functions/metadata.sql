-- The helpers of the columns jobs.errors and jobs.metadata (what they hold:
-- sql/migrations/baseline_*.sql): each bound and each key's format is written once here,
-- for every statement that writes them.

-- `errors` with `entry` appended, keeping the last 10 entries: used by every statement
-- that records a failure (sql/complete/complete_error.sql, sql/maintain/rescue.sql,
-- sql/admin/retry_jobs.sql).
CREATE OR REPLACE FUNCTION {{schema}}.push_error(errors jsonb, entry jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE
        WHEN jsonb_array_length(all_entries) <= 10 THEN all_entries
        ELSE (SELECT jsonb_agg(e ORDER BY n)
              FROM jsonb_array_elements(all_entries) WITH ORDINALITY AS t(e, n)
              WHERE n > jsonb_array_length(all_entries) - 10)
    END
    FROM (SELECT coalesce(push_error.errors, '[]'::jsonb) || jsonb_build_array(push_error.entry))
        AS s(all_entries);
$function$;

-- `metadata` with `entry` appended to its history (snoozes and aborts), keeping the last
-- 20 entries (entry NULL: unchanged).
CREATE OR REPLACE FUNCTION {{schema}}.push_history(metadata jsonb, entry jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN push_history.entry IS NULL THEN push_history.metadata
    ELSE coalesce(push_history.metadata, '{}'::jsonb) || jsonb_build_object('history', (
        SELECT jsonb_agg(e ORDER BY n)
        FROM jsonb_array_elements(
            coalesce(push_history.metadata->'history', '[]'::jsonb)
            || jsonb_build_array(push_history.entry)) WITH ORDINALITY AS t(e, n)
        WHERE n > jsonb_array_length(coalesce(push_history.metadata->'history', '[]'::jsonb))
                  - 19))
    END;
$function$;

-- `metadata` with the progress and checkpoint a handler reported (NULL: keep the saved
-- one): the heartbeat, the outcome, and ctx.transaction() save them the same way.
CREATE OR REPLACE FUNCTION {{schema}}.with_progress(metadata jsonb, progress double precision, checkpoint jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT coalesce(with_progress.metadata, '{}'::jsonb)
        || CASE WHEN with_progress.progress IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('progress', with_progress.progress) END
        || CASE WHEN with_progress.checkpoint IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('checkpoint', with_progress.checkpoint) END;
$function$;

-- How many times the job snoozed (bounded by its task's max_snoozes).
CREATE OR REPLACE FUNCTION {{schema}}.snoozes(metadata jsonb)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT coalesce((snoozes.metadata->>'snoozes')::integer, 0);
$function$;
