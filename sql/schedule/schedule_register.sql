-- Register the schedules of a worker's periodic tasks, or update their definitions
-- (their progress, since and last_tick, stays). $1 names, $2 cron expressions,
-- $3 time zones, $4 missed policies, $5 queues; $6 since, for new ones (NULL: now).
INSERT INTO {{schema}}.schedules (name, cron, timezone, missed, queue, since)
SELECT s.name, s.cron, s.timezone, s.missed, s.queue, coalesce($6::timestamptz, now())
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
    AS s(name, cron, timezone, missed, queue)
ON CONFLICT (name) DO UPDATE
SET cron = excluded.cron, timezone = excluded.timezone, missed = excluded.missed,
    queue = excluded.queue, registered_at = now();
