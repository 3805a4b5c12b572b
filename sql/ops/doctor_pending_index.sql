-- The index the claim must read: whether it exists, is valid and ready; a queue with
-- pending jobs to explain the claim for; and the table's size in pages now (a Seq
-- Scan of a table this small is the planner's right choice, not a problem).
SELECT i.indisvalid AS valid, i.indisready AS ready,
       (SELECT queue FROM {{schema}}.jobs WHERE status = 'pending' LIMIT 1) AS some_queue,
       pg_relation_size('{{schema}}.jobs'::regclass)
           / current_setting('block_size')::int AS pages
FROM (SELECT to_regclass('{{schema}}.jobs_pending_idx') AS oid) AS wanted
LEFT JOIN pg_index i ON i.indexrelid = wanted.oid;
