-- Cancel workflow $1: its pending, waiting and running jobs, as cancel.sql does one
-- (locked in id order, a running one's worker told on channel $2), and the workflow
-- marked cancelled. Jobs that others depend on settle their children in one call (the
-- group counters and edges: sql/functions/workflows.sql); children cancelled here are
-- no longer waiting, so that call leaves them alone. No row: no such workflow.
WITH wf AS (
    UPDATE {{schema}}.workflows w SET cancelled_at = coalesce(w.cancelled_at, now())
    WHERE w.id = $1
    RETURNING w.id
), target AS (
    SELECT j.id, j.status AS was
    FROM {{schema}}.jobs j
    JOIN {{schema}}.workflow_jobs m ON m.job_id = j.id
    WHERE m.workflow_id = $1 AND j.status IN ('pending', 'running', 'waiting')
    ORDER BY j.id
    FOR UPDATE OF j
), cancelled AS (
    UPDATE {{schema}}.jobs j
    SET status = 'cancelled', finished_at = now(), heartbeat_at = NULL
    FROM target
    WHERE j.id = target.id AND j.status IN ('pending', 'running', 'waiting')
    RETURNING j.id, target.was,
        CASE WHEN j.metadata ? 'waited' THEN pg_notify({{done_channel}}, j.id::text) END,
        j.metadata ? 'dependents' AS has_dependents
)
SELECT wf.id,
       (SELECT count(*) FROM cancelled) AS cancelled,
       (SELECT count(pg_notify($2, jsonb_build_object('cancel', c.id)::text))
        FROM cancelled c WHERE c.was = 'running') AS notified,
       (SELECT {{schema}}.settle_dependents(array_agg(c.id ORDER BY c.id),
                   array_agg('cancelled'::text), NULL)
        FROM cancelled c WHERE c.has_dependents) AS settled
FROM wf;
