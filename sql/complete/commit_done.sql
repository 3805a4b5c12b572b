-- ctx.transaction(): the job's `done`, written in the handler's own transaction, so
-- that its rows and the completion commit together or not at all. Guarded by the
-- lease (id $1, attempt $2, worker $3): no row when the job is no longer this run's
-- (its lease expired and it was rescued, maybe claimed again), and the handler's
-- transaction is rolled back. $4 result (JSON text or NULL), $5 progress, $6 state
-- (NULL: none reported). A job others depend on settles its children here
-- (sql/functions/dependencies.sql), in the handler's transaction; a workflow group's
-- member is counted at its commit (count_member(), sql/functions/workflows.sql).
UPDATE {{schema}}.jobs
SET status = 'done', finished_at = now(), result = $4::jsonb,
    metadata = CASE WHEN $5::float8 IS NULL AND $6::jsonb IS NULL THEN metadata
                    ELSE {{schema}}.with_progress(metadata, $5::float8, $6::jsonb) END,
    locked_at = NULL, locked_by = NULL, heartbeat_at = NULL
WHERE id = $1 AND attempts = $2 AND status = 'running' AND locked_by = $3
RETURNING id, CASE WHEN metadata ? 'waited' THEN pg_notify({{done_channel}}, id::text) END,
    CASE WHEN metadata ? 'dependents'
         THEN CASE WHEN metadata ? 'group' THEN {{schema}}.count_member(id)
              ELSE {{schema}}.settle_dependents(ARRAY[id], ARRAY['done'], ARRAY[result])
              END END;
