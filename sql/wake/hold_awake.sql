-- Advertise that this worker is awake on queues $2 (session locks on the LISTEN
-- connection; see the protocol in sql/functions/wake.sql). Returns the queues held: a
-- producer deciding at this instant keeps its queue, and we try again later.
SELECT coalesce(array_agg(q) FILTER (
    WHERE pg_try_advisory_lock_shared(hashtext($1 || ':awake'), hashtext(q))), '{}')
FROM unnest($2::text[]) AS q;
