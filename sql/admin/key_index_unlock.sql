-- Release the lock of key_index_lock.sql.
SELECT pg_advisory_unlock(hashtext('{{schema_name}}:key_index'), 0);
