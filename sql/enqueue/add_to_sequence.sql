-- Put the jobs $1, just inserted in this transaction, at the end of the sequence $2, in
-- $1's order: each job's status comes back, in that order (sql/functions/sequences.sql).
SELECT id, status FROM {{schema}}.add_to_sequence($1::bigint[], $2::text);
