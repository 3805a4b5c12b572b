-- Wake the workers of queues $2 (channel $1): a worker that stops fetching for a
-- while (saturated, or stopping) hands its "awake" role over to its peers.
SELECT count(pg_notify($1, q)) FROM unnest($2::text[]) AS q;
