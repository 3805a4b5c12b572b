-- The layout's settings, and for each finished status that has partitions where its
-- oldest one starts: what a maintenance pass needs to decide what to move and drop.
-- The starts go as text (archive_move.sql casts back): a timestamptz[] result would have
-- asyncpg introspect the array type on each new connection (three statements).
SELECT l.enabled, l.archive_after, l.partition_width, p.statuses, p.oldest
FROM {{schema}}.archive_layout l,
     LATERAL (
         SELECT coalesce(array_agg(status::text ORDER BY status), '{}') AS statuses,
                coalesce(array_agg(oldest::text ORDER BY status), '{}') AS oldest
         FROM (SELECT status, min(from_at) AS oldest
               FROM {{schema}}.archive_partitions
               GROUP BY status) AS g
     ) AS p;
