-- Claim up to $2 runnable jobs of queue $1 for worker $3 in one statement: lock
-- with SKIP LOCKED (concurrent workers get disjoint rows), mark running, count
-- the attempt, start the lease. The planner walks jobs_pending_idx in order and
-- stops at the LIMIT (its first key is hashtext(queue): see the index in
-- migrations/baseline_*.sql).
-- The update finds each locked row by its ctid (a Tid Scan), not by a second
-- descent of the primary key (benchmarks/README.md has the instruction counts).
-- The row is locked by this statement, so its ctid cannot change before the
-- update; `j.id = next.id` is a second check that costs nothing.
-- dequeue_completing.sql may be prepended (see Statements). The timestamps come
-- back as epoch seconds (float8, exact to the microsecond): asyncpg's decoding of
-- each timestamptz costs more, and a batch of jobs enqueued together shares one
-- value (aiopgq/_models.py, job_from_claimed_row, decodes each value once).
WITH {{#completing}}{{> claim/dequeue_completing.sql}},
{{/completing}}next AS (
    SELECT ctid AS tid, id
    FROM {{schema}}.jobs
    WHERE status = 'pending' AND hashtext(queue) = hashtext($1) AND queue = $1
      AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {{schema}}.jobs j
SET status = 'running', attempts = j.attempts + 1,
    locked_at = now(), locked_by = $3, heartbeat_at = now()
FROM next
WHERE j.ctid = next.tid AND j.id = next.id
RETURNING j.id, j.queue, j.task, j.payload::text, j.priority, j.attempts, j.max_attempts,
          date_part('epoch', j.run_at), date_part('epoch', j.created_at){{#traced}}, j.trace_context::text{{/traced}}{{#checkpoint}}, (j.metadata->'checkpoint')::text{{/checkpoint}};
