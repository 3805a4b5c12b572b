-- Claim up to $2 runnable jobs of the queues $1 for worker $3 in one statement:
-- lock with SKIP LOCKED (concurrent workers get disjoint rows), mark running,
-- count the attempt, start the lease.
--
-- Each queue is read through jobs_pending_idx in order and stops at the LIMIT
-- (LATERAL with `queue = q.name`: a plain `queue = ANY($1)` makes PostgreSQL < 17
-- sort every pending row of those queues first), then the candidates are merged
-- by priority. With several queues, rows locked beyond the final LIMIT are
-- released when the statement commits, a few milliseconds later.
--
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
    SELECT c.id
    FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at
        FROM {{schema}}.jobs
        WHERE status = 'pending' AND queue = q.name AND run_at <= now()
        ORDER BY priority DESC, run_at, id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT $2
)
UPDATE {{schema}}.jobs j
SET status = 'running', attempts = j.attempts + 1,
    locked_at = now(), locked_by = $3, heartbeat_at = now()
FROM next
WHERE j.id = next.id
RETURNING j.id, j.queue, j.task, j.payload::text, j.priority, j.attempts, j.max_attempts,
          j.run_at, j.created_at;
