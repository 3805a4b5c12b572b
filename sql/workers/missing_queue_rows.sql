-- Which of the queues $1 have no row in the queues table. A queue whose key limit only
-- its tasks declare keeps its key cursor (whose turn it is) in its row, which the
-- worker adds at start (add_queue_rows.sql).
SELECT coalesce(array_agg(q ORDER BY q), '{}')
FROM unnest($1::text[]) AS q
WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queues AS c WHERE c.queue = q);
