-- Mark a batch of jobs done. $1 ids, $2 the attempt each was claimed with (the
-- lease token: a job rescued and claimed again is not overwritten by its old
-- owner), $3 results as JSON text (NULL for none), $4 worker id.
UPDATE {{schema}}.jobs j
SET status = 'done', finished_at = now(), result = o.result::jsonb,
    locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
FROM unnest($1::bigint[], $2::int[], $3::text[]) AS o(id, attempt, result)
WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $4;
