-- Switch the insert trigger's NOTIFY on or off for one queue (off = poll-only).
INSERT INTO {{schema}}.queues (queue, notify) VALUES ($1, $2)
ON CONFLICT (queue) DO UPDATE SET notify = excluded.notify;
