-- Mark a batch of jobs done. $1 ids, $2 the attempt each was claimed with (array
-- literals: aiopgq/_db/arrays.py; the attempt is the lease token: a job rescued and
-- claimed again is not overwritten by its old owner), $3 the results of the jobs that
-- returned one, as a JSON object by job id (the scalar subquery parses it once per
-- statement; '{}', the common case, costs one comparison per job), $4 worker id. A job
-- someone awaits (`waited` in its metadata: see the column in migrations/baseline_*.sql)
-- is announced on the done channel; for the others (metadata NULL) the RETURNING
-- expression is one NULL test, and nothing goes to the client. A job that others depend
-- on (`dependents`) settles its children in this statement (sql/functions/dependencies.sql),
-- one call per such row as in dequeue_completing.sql; for the others that is a second
-- NULL test. A member of a workflow group (`group` too) is only named, counted at commit
-- (count_member(), sql/functions/workflows.sql).
WITH done AS (
    UPDATE {{schema}}.jobs j
    SET status = 'done', finished_at = now(),
        result = CASE WHEN $3::text <> '{}' THEN (SELECT $3::text::jsonb) -> j.id::text END,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
    FROM unnest($1::text::bigint[], $2::text::int[]) AS o(id, attempt)
    WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $4
    RETURNING CASE WHEN j.metadata ? 'waited' THEN pg_notify({{done_channel}}, j.id::text) END,
        CASE WHEN j.metadata ? 'dependents'
             THEN CASE WHEN j.metadata ? 'group' THEN {{schema}}.count_member(j.id)
                  ELSE {{schema}}.settle_dependents(ARRAY[j.id], ARRAY['done'],
                                                     ARRAY[j.result]) END END
)
SELECT;
