-- The worker is going to sleep: producers must NOTIFY again for these queues.
SELECT count(pg_advisory_unlock_shared(hashtext($1 || ':awake'), hashtext(q)))
FROM unnest($2::text[]) AS q;
