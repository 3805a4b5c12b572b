-- Give the jobs $1, just inserted in this transaction, the parents $2 with the policy $3
-- ('cancel' or 'run'): each child's status comes back, in $1's order
-- (sql/functions/dependencies.sql).
SELECT id, status FROM {{schema}}.add_dependencies($1::bigint[], $2::bigint[], $3::text);
