-- A workflow's graph for the jobs its enqueue just inserted, in the same transaction
-- (sql/functions/workflows.sql): $1 name, $2 jobs, $3 their nodes, $4 groups, $5
-- policies, $6 group names, $7 and $8 the edges (child, parent). Returns its id.
SELECT {{schema}}.create_workflow($1, $2::bigint[], $3::int[], $4::int[], $5::text[],
    $6::text[], $7::bigint[], $8::bigint[]);
