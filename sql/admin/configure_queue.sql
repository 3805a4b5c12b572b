-- Set the limits of queue $1 named in $6 (the others keep their values) to $2
-- concurrency, $3 rate, $4 burst, $5 key_concurrency (NULL: none), and tell the
-- workers at once with a control message on channel $7 (aiopgq/_worker/control.py;
-- they also re-read which queues have limits every poll interval).
WITH saved AS (
    INSERT INTO {{schema}}.queues AS q (queue, concurrency, rate, burst, key_concurrency)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (queue) DO UPDATE SET
        concurrency = CASE WHEN 'concurrency' = ANY($6::text[])
                           THEN excluded.concurrency ELSE q.concurrency END,
        rate = CASE WHEN 'rate' = ANY($6::text[]) THEN excluded.rate ELSE q.rate END,
        burst = CASE WHEN 'burst' = ANY($6::text[]) THEN excluded.burst ELSE q.burst END,
        key_concurrency = CASE WHEN 'key_concurrency' = ANY($6::text[])
                               THEN excluded.key_concurrency ELSE q.key_concurrency END
    RETURNING q.queue, q.concurrency, q.rate, q.burst, q.key_concurrency
)
SELECT saved.* FROM saved CROSS JOIN pg_notify($7, json_build_object('limits', $1)::text);
