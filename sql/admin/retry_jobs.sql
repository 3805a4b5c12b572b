-- Put jobs $1 whose status is one of $2 (failed, or failed and cancelled) back to
-- pending as new: attempts and snoozes reset, run now, no owner (its checkpoint stays:
-- the new run resumes from it). Their errors stay in the
-- history (`errors`; a row with a last_error and no `errors`, written before the
-- schema kept a history, gets its last_error as the first entry); last_error stays the
-- latest error. Wakes the workers of their
-- queues on channel $3 (an UPDATE fires no insert trigger). Returns the ids retried.
-- A retried job that others depend on reopens its edges and brings back the children
-- its failure cancelled (revive_dependents(), sql/functions/dependencies.sql). A job
-- with parents that is retried itself runs at once, as any retried job: retrying it
-- is the operator's decision over its parents' outcome.
--
-- An idempotency key allows one live job: a job whose key a live job holds stays
-- as it is, and of several with the same key only the newest is retried. A live job
-- enqueued with the key meanwhile makes the statement fail on the unique index; the
-- caller runs it again (aiopgq/_client/admin.py).
WITH candidates AS (
    SELECT DISTINCT ON (c.idempotency_key IS NULL, coalesce(c.idempotency_key, c.id::text)) c.id
    FROM {{schema}}.jobs c
    WHERE c.id = ANY($1::bigint[]) AND c.status = ANY($2::{{schema}}.job_status[])
      AND (c.idempotency_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {{schema}}.jobs k
          WHERE k.idempotency_key = c.idempotency_key AND k.status IN ('pending', 'running')))
    ORDER BY c.idempotency_key IS NULL, coalesce(c.idempotency_key, c.id::text), c.id DESC
), retried AS (
    UPDATE {{schema}}.jobs j
    SET status = 'pending', attempts = 0, run_at = now(), finished_at = NULL,
        locked_at = NULL, locked_by = NULL, heartbeat_at = NULL,
        errors = CASE WHEN j.errors IS NULL AND j.last_error IS NOT NULL
            THEN {{schema}}.push_error(NULL, jsonb_build_object(
                'at', extract(epoch FROM coalesce(j.finished_at, now())), 'attempt', j.attempts,
                'worker', NULL, 'error', j.last_error))
            ELSE j.errors END,
        metadata = j.metadata - 'snoozes'  -- a new job snoozes max_snoozes times again
    FROM candidates
    WHERE j.id = candidates.id AND j.status = ANY($2::{{schema}}.job_status[])
    RETURNING j.id, j.queue, j.metadata ? 'dependents' AS has_dependents
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM retried), '{}') AS ids,
       (SELECT count(pg_notify($3, queue)) FROM (SELECT DISTINCT queue FROM retried) AS q)
           AS notified,
       (SELECT {{schema}}.revive_dependents(array_agg(id ORDER BY id))
        FROM retried WHERE has_dependents) AS revived;
