-- Prepended to a dequeue statement when outcomes ride along: jobs this worker
-- finished ($4 ids, $5 attempts as lease tokens, $6 results as JSON text) are
-- marked done by the same statement that claims the next batch, so a busy
-- worker commits once per batch instead of twice. Worker id is $3. A data-modifying
-- CTE runs to completion, RETURNING list included, whether the query reads it or
-- not: that is where a job someone awaits (`waited` in its metadata) is announced, as
-- in complete_done.sql.
-- A job others depend on settles its children in `settled` (sql/functions/
-- dependencies.sql), once for the batch as in complete_done.sql, so that a batch locks
-- its children in one order. The claim's own UPDATE does not read `completed` (that
-- would change its plan): `settled` is a data-modifying CTE, which runs whether read or
-- not, whose one-time filter calls settle_dependents() (only when a row has dependents:
-- HAVING) and is never true, so it deletes nothing.
completed AS (
    UPDATE {{schema}}.jobs j
    SET status = 'done', finished_at = now(), result = o.result::jsonb,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
    FROM unnest($4::bigint[], $5::int[], $6::text[]) AS o(id, attempt, result)
    WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $3
    RETURNING CASE WHEN j.metadata ? 'waited' THEN pg_notify({{done_channel}}, j.id::text) END,
              CASE WHEN j.metadata ? 'dependents' THEN j.id END AS parent, j.result
), settled AS (
    DELETE FROM {{schema}}.job_dependencies
    WHERE (SELECT {{schema}}.settle_dependents(
                      array_agg(c.parent), array_agg('done'::text), array_agg(c.result))
           FROM completed c WHERE c.parent IS NOT NULL HAVING count(*) > 0) < 0
)
