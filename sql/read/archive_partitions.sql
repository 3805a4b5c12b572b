-- The layout's settings, and each archive partition with its bounds, the row count
-- the statistics estimate (-1: never analyzed) and its size on disk.
SELECT l.enabled, l.archive_after, l.partition_width, l.changed_at,
       p.status::text, p.from_at, p.to_at, p.name,
       c.reltuples::bigint AS rows_estimate,
       pg_total_relation_size(c.oid) AS bytes
FROM {{schema}}.archive_layout l
LEFT JOIN {{schema}}.archive_partitions p ON true
LEFT JOIN pg_class c
    ON c.relname = p.name AND c.relnamespace = '{{schema_name}}'::regnamespace
ORDER BY p.status, p.from_at;
