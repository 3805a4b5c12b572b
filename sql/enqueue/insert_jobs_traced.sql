-- insert_jobs.sql with the enqueuing span's trace context ($7, JSON text) for
-- every job of the batch, used only by producers that trace (aiopgq.tracing). Keep
-- the two alike (tests/observe compares them).
WITH inserted AS (
    INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts, trace_context)
    SELECT $1, e.payload, $3, $4, coalesce($5::timestamptz, now()), $6, $7::text::jsonb
    FROM jsonb_array_elements($2::text::jsonb) AS e(payload)
    WHERE (SELECT {{schema}}.wake_once($3, coalesce($5::timestamptz, now())))
    RETURNING id
)
SELECT coalesce(array_agg(id), '{}') AS ids, now() AS created_at FROM inserted;
