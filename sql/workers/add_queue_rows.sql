-- Rows without limits for the queues $1 (see missing_queue_rows.sql). INSERT on the
-- queues table is the owner's (and configure()'s): a worker role granted least
-- privilege cannot, and says so (aiopgq/_worker/key_limits.py).
INSERT INTO {{schema}}.queues (queue)
SELECT q FROM unnest($1::text[]) AS q ORDER BY q
ON CONFLICT (queue) DO NOTHING;
