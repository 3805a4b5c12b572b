-- Claim up to $2 jobs of the limited queues $1 (an array) for worker $3, with the
-- limits of each queue applied (see claim_limited in functions/claim_limited.sql:
-- lanes per queue, counts taken after them). $4: wait for a queue's lanes (false:
-- skip a queue a peer is claiming). $5-$7: finished jobs marked done first, as in
-- dequeue_completing.sql (ids and attempts as array literals; empty for none). $8: the key limits the worker's
-- tasks declare, a JSON object {queue: limit} (NULL: none). Rows with a NULL id are
-- not jobs: they say when a limit may let held-back jobs through. The columns of
-- dequeue.sql, with the same optional ones (traced: trace_context, checkpoint: the
-- saved state).
SELECT c.id, c.queue, c.task, c.payload, c.priority, c.attempts, c.max_attempts, c.run_at,
       c.created_at{{#traced}}, c.trace_context{{/traced}}{{#checkpoint}}, c.checkpoint{{/checkpoint}}
FROM {{schema}}.claim_limited($1::text[], $2, $3, $4, $5::text::bigint[], $6::text::int[], $7::text[], $8::jsonb) AS c;
