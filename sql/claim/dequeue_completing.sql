-- Prepended to a dequeue statement when outcomes ride along: jobs this worker
-- finished ($4 ids, $5 attempts as lease tokens, both as array literals; $6 the results
-- of those that returned one, a JSON object by job id: _db/arrays.py) are
-- marked done by the same statement that claims the next batch, so a busy
-- worker commits once per batch instead of twice. Worker id is $3. A data-modifying
-- CTE runs to completion, RETURNING list included, whether the query reads it or
-- not: that is where a job someone awaits (`waited` in its metadata) is announced, as
-- in complete_done.sql.
-- A job others depend on (`dependents`) settles its children in its RETURNING, one
-- call per such row (sql/functions/dependencies.sql): for the other rows that is one
-- NULL test, as for `waited`; a workflow group's member (`group` too) is only named, its
-- count and outcome written at commit by one statement for all of the transaction's
-- members (count_member(), sql/functions/workflows.sql). (One call for the whole batch
-- would need a second CTE reading this one, whose tuplestore costs every job server
-- instructions, measurably: benchmarks/instructions.py.)
-- A row of these jobs locked by another transaction (an operator's SELECT ... FOR
-- UPDATE, a cancel in a long transaction, or a peer's claim: FOR UPDATE SKIP LOCKED
-- still waits while it follows a row's chain of updates, and two claims carrying
-- `done`s can wait for each other until deadlock_timeout, 1 s, ends one) is not waited
-- for: the one-time filter sets lock_timeout for the rest of this statement's
-- transaction before any row is updated, the statement fails with lock_not_available
-- (55P03) and nothing is written; the worker claims again without the `done`s and the
-- completer writes them once the lock is gone (aiopgq/_worker/claims.py).
completed AS (
    UPDATE {{schema}}.jobs j
    SET status = 'done', finished_at = now(),
        result = CASE WHEN $6::text <> '{}' THEN (SELECT $6::text::jsonb) -> j.id::text END,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
    FROM unnest($4::text::bigint[], $5::text::int[]) AS o(id, attempt)
    WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $3
      AND (SELECT set_config('lock_timeout', '10ms', true)) IS NOT NULL
    RETURNING CASE WHEN j.metadata ? 'waited' THEN pg_notify({{done_channel}}, j.id::text) END,
        CASE WHEN j.metadata ? 'dependents'
             THEN CASE WHEN j.metadata ? 'group' THEN {{schema}}.count_member(j.id)
                  ELSE {{schema}}.settle_dependents(ARRAY[j.id], ARRAY['done'],
                                                     ARRAY[j.result]) END END
)
