-- heartbeat.sql, when handlers reported progress since the last beat: the same lease
-- extension, and the progress and state of those jobs in the same statement (no round
-- trip of their own). $1 held ids, $2 worker id; $3 ids that reported, $4 the attempt
-- each reported in (a report of an earlier run of the job is dropped), $5 fractions,
-- $6 states as JSON text (NULL keeps the saved one). Returns what heartbeat.sql returns.
-- Rows locked by a write in progress are skipped, as in heartbeat.sql (their progress
-- is dropped with the lease extension).
WITH mine AS (
    SELECT id
    FROM {{schema}}.jobs
    WHERE id = ANY($1::bigint[]) AND status = 'running' AND locked_by = $2
    FOR UPDATE SKIP LOCKED
), beat AS (
    UPDATE {{schema}}.jobs j
    SET heartbeat_at = now(),
        metadata = CASE WHEN p.attempt = j.attempts
                        THEN {{schema}}.with_progress(j.metadata, p.progress, p.state::jsonb)
                        ELSE j.metadata END
    FROM mine
    LEFT JOIN unnest($3::bigint[], $4::int[], $5::float8[], $6::text[])
        AS p(id, attempt, progress, state) ON p.id = mine.id
    WHERE j.id = mine.id
    RETURNING j.id
)
SELECT ARRAY(SELECT id FROM beat) AS renewed,
       coalesce(array_agg(h.id) FILTER (
           WHERE j.id IS NULL OR j.status <> 'running' OR j.locked_by IS DISTINCT FROM $2),
           '{}') AS lost,
       coalesce(array_agg(h.id) FILTER (WHERE j.status = 'cancelled'), '{}') AS cancelled
FROM unnest($1::bigint[]) AS h(id)
LEFT JOIN {{schema}}.jobs j ON j.id = h.id;
