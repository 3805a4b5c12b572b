-- Enqueue many jobs of one task in one round trip. $2 is one JSON array of the
-- payloads (one parse on the server instead of one value per job); the other
-- columns are the same for every job. RETURNING follows the array's order: the
-- rows come from one function scan, inserted in the order it produces them.
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts)
SELECT $1, e.payload, $3, $4, coalesce($5::timestamptz, now()), $6
FROM jsonb_array_elements($2::text::jsonb) AS e(payload)
RETURNING id, created_at;
