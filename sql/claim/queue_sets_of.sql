-- The paused and the limited queues among the `queues` of the `args` row of the
-- statement that includes it (queue_sets.sql, worker_start.sql; never run alone). Both
-- sorted; a queue is limited when it has a concurrency, a rate or a key limit.
SELECT coalesce(array_agg(q.queue ORDER BY q.queue) FILTER (WHERE q.paused), '{}') AS paused,
       coalesce(array_agg(q.queue ORDER BY q.queue) FILTER (
           WHERE q.concurrency IS NOT NULL OR q.rate IS NOT NULL
              OR q.key_concurrency IS NOT NULL
       ), '{}') AS limited
FROM args a JOIN {{schema}}.queues q ON q.queue = ANY(a.queues)
