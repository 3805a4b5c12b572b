-- aiopgq schema, version 7: jobs_running_idx holds the rows that have a lease
-- (heartbeat_at set), not the rows whose status is 'running'.
--
-- Every claimed row gets heartbeat_at and every way out of `running` clears it, so
-- the index holds the same rows. But a partial index whose predicate a query implies
-- may be read whole: the completions (`status = 'running' AND locked_by = ...`,
-- looked up by id) implied the old one, and with statistics taken while nothing
-- ran (one running row estimated) a generic plan scanned the index once per
-- outcome, quadratic in the batch. Only statements about the lease itself
-- (heartbeat_at < ..., heartbeat_at IS NOT NULL: the rescuer, the orphan release)
-- imply this predicate, so the completions find each job by its id.
DROP INDEX {{schema}}.jobs_running_idx;
CREATE INDEX jobs_running_idx ON {{schema}}.jobs (heartbeat_at)
    WHERE heartbeat_at IS NOT NULL;
