-- dequeue_limited.sql with each job's trace_context (JSON text) as a tenth column,
-- for workers whose observers read it (aiopgq.tracing), as Statements.claim(traced=True).
SELECT c.id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts, c.run_at,
       c.created_at, c.trace_context
FROM {{schema}}.claim_limited($1::text[], $2, $3, $4, $5::bigint[], $6::int[], $7::text[]) AS c;
