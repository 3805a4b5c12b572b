-- Wait until every transaction that skipped its NOTIFY for these queues has ended
-- (see the protocol in sql/functions/wake.sql). Autocommit: the locks are released as
-- soon as they are granted. $1 schema name, $2 queues.
SELECT count(pg_advisory_xact_lock(hashtext($1 || ':skip'), hashtext(q)))
FROM unnest($2::text[]) AS q;
