-- The concurrency key $2 of the jobs $1 that enqueue_unique() just inserted or
-- replaced (it takes no key of its own), in its transaction: no claim sees them
-- without their key.
UPDATE {{schema}}.jobs SET concurrency_key = $2 WHERE id = ANY($1::bigint[]);
