-- Enqueue many jobs of one task in one round trip. $2 is one JSON array of the
-- payloads (one parse on the server instead of one value per job); the other
-- columns are the same for every job. The wake-up decision is made once for the
-- batch (the InitPlan runs before the first row), so the insert trigger returns
-- at once for each row. The ids come back as one array in the array's order (one
-- function scan, inserted in the order it produces the rows), with the statement's
-- now(): created_at of every row, and run_at of every row when $5 is NULL.
WITH inserted AS (
    INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts)
    SELECT $1, e.payload, $3, $4, coalesce($5::timestamptz, now()), $6
    FROM jsonb_array_elements($2::text::jsonb) AS e(payload)
    WHERE (SELECT {{schema}}.wake_once($3, coalesce($5::timestamptz, now())))
    RETURNING id
)
SELECT coalesce(array_agg(id), '{}') AS ids, now() AS created_at FROM inserted;
