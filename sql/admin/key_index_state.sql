-- Whether jobs_pending_key_idx of schema $1 exists (NULL: no) and is usable (a
-- CREATE INDEX CONCURRENTLY that failed leaves an invalid one behind).
SELECT i.indisvalid
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = 'jobs_pending_key_idx';
