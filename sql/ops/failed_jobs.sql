-- Failed jobs kept per queue (until the maintenance leader prunes them). This reads
-- every retained finished row, so `aiopgq top` runs it every few refreshes only.
SELECT queue, count(*) AS failed
FROM {{schema}}.jobs
WHERE status = 'failed'
GROUP BY queue;
