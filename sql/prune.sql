-- Delete up to $2 finished jobs older than $1 seconds (oldest first), so the
-- pruner never holds long locks or writes a huge WAL burst. A done job whose
-- idempotency key is still held (unique_for, migration 0010) stays until its
-- window is over.
DELETE FROM {{schema}}.jobs
WHERE id IN (
    SELECT id
    FROM {{schema}}.jobs
    WHERE status IN ('done', 'failed', 'cancelled')
      AND finished_at < now() - make_interval(secs => $1)
      AND (status <> 'done' OR unique_for IS NULL OR finished_at + unique_for < now())
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
);
