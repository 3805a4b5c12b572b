-- Claim up to $2 runnable jobs of queue $1 for worker $3 in one statement: lock
-- with SKIP LOCKED (concurrent workers get disjoint rows), mark running, count
-- the attempt, start the lease. `queue = $1` lets the planner walk
-- jobs_pending_idx in order and stop at the LIMIT (`queue = ANY(...)` would make
-- PostgreSQL < 17 sort every pending row instead; see dequeue.sql).
-- Outcomes of jobs this worker finished ride along ($4 ids, $5 attempts as lease
-- tokens, $6 results as JSON text): one commit per batch instead of two.
WITH completed AS (
    UPDATE {{schema}}.jobs j
    SET status = 'done', finished_at = now(), result = o.result::jsonb,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
    FROM unnest($4::bigint[], $5::int[], $6::text[]) AS o(id, attempt, result)
    WHERE j.id = o.id AND j.attempts = o.attempt AND j.status = 'running' AND j.locked_by = $3
),
next AS (
    SELECT id
    FROM {{schema}}.jobs
    WHERE status = 'pending' AND queue = $1::text AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {{schema}}.jobs j
SET status = 'running', attempts = j.attempts + 1,
    locked_at = now(), locked_by = $3, heartbeat_at = now()
FROM next
WHERE j.id = next.id
RETURNING j.id, j.queue, j.task, j.payload::text, j.priority, j.attempts, j.max_attempts,
          j.run_at, j.created_at;
