-- Cancel a job that is pending or running. One row when the job exists: `cancelled`
-- true if this call cancelled it (with its task and queue, for observers, and `was`, its
-- status before), false if it had finished (left alone); no row when no job has that id.
-- A running job is cancelled here, at once: its worker's outcome (guarded by status =
-- 'running') can no longer change it, so it is not retried. The worker keeps running the
-- handler until it hears of it: a NOTIFY on channel $2 with the control payload
-- {"cancel": id} (aiopgq/_worker/control.py), or else its next heartbeat (heartbeat.sql
-- returns the cancelled jobs it still holds). locked_by stays: it names the worker that
-- ran the job. FOR UPDATE waits for a claim or completion that holds the row, then
-- re-reads its status (so `was` is the status it had when cancelled). A job someone
-- awaits is announced on the done channel (complete_done.sql). A waiting job (it has
-- parents) is cancelled as a pending one; a job others depend on settles its children
-- (sql/functions/dependencies.sql: with the default policy they are cancelled too,
-- transitively). A failed job of a sequence (`sequence` in its metadata) can be
-- cancelled too: it then stops holding its sequence; the job a sequenced job waits on is
-- locked before it, as its completion would (lock_sequence_parents(), sequences.sql).
WITH target AS (
    SELECT id, status AS was
    FROM {{schema}}.jobs
    WHERE id = $1
      AND (status IN ('pending', 'running', 'waiting')
           OR (status = 'failed' AND metadata ? 'sequence'))
      AND (SELECT {{schema}}.lock_sequence_parents($1))
    FOR UPDATE
), cancelled AS (
    UPDATE {{schema}}.jobs j
    SET status = 'cancelled', finished_at = now(), heartbeat_at = NULL
    FROM target
    WHERE j.id = target.id
    RETURNING j.id, j.task, j.queue, target.was,
        CASE WHEN j.metadata ? 'waited' THEN pg_notify({{done_channel}}, j.id::text) END,
        j.metadata ? 'dependents' AS has_dependents
)
SELECT c.id IS NOT NULL AS cancelled, c.task, c.queue, c.was::text AS was,
       CASE WHEN c.was = 'running'
            THEN pg_notify($2, jsonb_build_object('cancel', c.id)::text) END AS notified,
       CASE WHEN c.has_dependents
            THEN {{schema}}.settle_dependents(ARRAY[c.id], ARRAY['cancelled'], NULL) END
           AS settled
FROM {{schema}}.jobs j
LEFT JOIN cancelled c ON true
WHERE j.id = $1;
