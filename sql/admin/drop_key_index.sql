-- Drop an invalid jobs_pending_key_idx left by a failed build, before building it again.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.jobs_pending_key_idx;
