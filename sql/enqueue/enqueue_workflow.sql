-- A workflow's jobs and graph in one statement (sql/functions/workflows.sql): $1 its
-- name, per node $2 tasks, $3 payloads (one JSON array of arrays), $4 queues, $5
-- priorities, $6 run_ats, $7 max_attempts, $8 concurrency keys, $9 policies, $10 group
-- names; $11 and $12 the edges by node (child, parent). Its id, the jobs' ids, created_at.
SELECT workflow_id, ids, created_at
FROM {{schema}}.enqueue_workflow($1, $2::text[], $3::text::jsonb, $4::text[], $5::int[],
    $6::timestamptz[], $7::int[], $8::text[], $9::text[], $10::text[], $11::int[], $12::int[]);
