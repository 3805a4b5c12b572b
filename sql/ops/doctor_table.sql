-- The jobs table's health: live and dead row versions, when it was last vacuumed
-- and analyzed, its size and its storage settings; and whether autovacuum runs.
SELECT s.n_live_tup, s.n_dead_tup, s.last_autovacuum, s.last_vacuum, s.last_autoanalyze,
       s.last_analyze, s.autovacuum_count,
       extract(epoch FROM now() - greatest(s.last_autovacuum, s.last_vacuum))::float8
           AS vacuum_age,
       coalesce(c.reloptions, '{}') AS reloptions,
       pg_total_relation_size(c.oid) AS total_bytes,
       current_setting('autovacuum') = 'on' AS autovacuum,
       current_setting('autovacuum_vacuum_threshold')::float8 AS default_threshold,
       current_setting('autovacuum_vacuum_scale_factor')::float8 AS default_scale_factor
FROM pg_class c
LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE c.oid = '{{schema}}.jobs'::regclass;
