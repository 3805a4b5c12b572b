-- Pending jobs by concurrency key, for the round-robin claim of queues with
-- key_concurrency (see claim_limited in functions/claim_limited.sql). Not part
-- of the migrations: every index on jobs costs every insert statement, so it is
-- created by configure() when a queue first gets a key limit (or by a worker whose
-- tasks declare one, aiopgq/_worker/key_limits.py), and stays. Only
-- keyed rows enter it. CONCURRENTLY: enqueues and claims go on while it is built.
-- Keyed by the queue's name, not its hash (as jobs_pending_idx is): the key claim's
-- queries say `queue = q`, which no other index serves, so the planner takes this one
-- whatever the statistics (before the first ANALYZE they make every plan look cheap).
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_pending_key_idx
    ON {{schema}}.jobs (queue, concurrency_key, priority DESC, run_at, id)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;
