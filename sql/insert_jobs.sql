-- Enqueue many jobs in one round trip: one array per column.
INSERT INTO {{schema}}.jobs (task, payload, queue, priority, run_at, max_attempts)
SELECT t, p::jsonb, q, pr, coalesce(r, now()), m
FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::int[])
    AS u(t, p, q, pr, r, m)
RETURNING id, run_at, created_at;
