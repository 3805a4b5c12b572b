-- Claim up to $2 runnable jobs of the queues $1 (an array) for worker $3: the
-- form of dequeue.sql for several queues. Each queue is read through
-- jobs_pending_idx in order and stops at the LIMIT (LATERAL with `queue =
-- q.name`: a plain `queue = ANY($1)` makes PostgreSQL < 17 sort every pending row
-- of those queues first), then the candidates are merged by priority. Rows locked
-- beyond the final LIMIT are released when the statement commits. The update
-- finds the rows by ctid, as in dequeue.sql.
WITH {{#completing}}{{> claim/dequeue_completing.sql}},
{{/completing}}next AS (
    SELECT c.tid, c.id
    FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT ctid AS tid, id, priority, run_at
        FROM {{schema}}.jobs
        WHERE status = 'pending' AND hashtext(queue) = hashtext(q.name) AND queue = q.name
          AND run_at <= now()
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
WHERE j.ctid = next.tid AND j.id = next.id
RETURNING j.id, j.queue, j.task, j.payload::text, j.priority, j.attempts, j.max_attempts,
          date_part('epoch', j.run_at), date_part('epoch', j.created_at){{#traced}}, j.trace_context::text{{/traced}}{{#checkpoint}}, (j.metadata->'checkpoint')::text{{/checkpoint}};
