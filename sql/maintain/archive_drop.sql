-- Drop the archive partitions of status $1 whose rows all finished more than $2 seconds
-- ago; returns their names (see sql/functions/archive.sql).
SELECT {{schema}}.archive_drop($1::text::{{schema}}.job_status, now() - make_interval(secs => $2));
