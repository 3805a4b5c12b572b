-- Pause ($2 true) or resume ($2 false) queue $1, and tell the workers at once on
-- channel $3: the control payload {"pause": queue} or {"resume": queue} (see
-- aiopgq/_worker/control.py; workers of older versions ignore it). A resume also
-- sends the queue's name, the plain wake-up every worker acts on.
WITH saved AS (
    INSERT INTO {{schema}}.queues (queue, paused) VALUES ($1, $2)
    ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused
    RETURNING queue
)
SELECT count(pg_notify($3, payload))
FROM saved
CROSS JOIN LATERAL unnest(CASE WHEN $2
    THEN ARRAY[jsonb_build_object('pause', saved.queue)::text]
    ELSE ARRAY[jsonb_build_object('resume', saved.queue)::text, saved.queue] END) AS payload;
