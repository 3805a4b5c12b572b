-- Take the lock that lets one session at a time build jobs_pending_key_idx (see
-- key_index.sql), without waiting: true when taken. A session-level lock, so that the
-- session waiting for it holds no transaction open (CREATE INDEX CONCURRENTLY waits
-- for every open one: two builders waiting on each other deadlock).
SELECT pg_try_advisory_lock(hashtext('{{schema_name}}:key_index'), 0);
