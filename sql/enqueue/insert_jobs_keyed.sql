-- insert_jobs.sql for jobs that share a concurrency key ($7), with the enqueuing
-- span's trace context ($8, JSON text, or NULL).
WITH inserted AS (
    INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts,
                                 concurrency_key, trace_context)
    SELECT $1, e.payload, $3, $4, coalesce($5::timestamptz, now()), $6, $7, $8::text::jsonb
    FROM jsonb_array_elements($2::text::jsonb) AS e(payload)
    WHERE (SELECT {{schema}}.wake_once($3, coalesce($5::timestamptz, now())))
    RETURNING id
)
SELECT coalesce(array_agg(id), '{}') AS ids, now() AS created_at FROM inserted;
