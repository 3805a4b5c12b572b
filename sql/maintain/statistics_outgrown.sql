-- True when the jobs table has grown past twice the pages its statistics describe
-- (at least 8) and this role may ANALYZE it (it owns the table). PostgreSQL keeps a
-- prepared statement's generic plan until the table's statistics change, and a plan
-- made while the table was nearly empty reads it whole (sequential scans), however
-- large it has grown since. Autovacuum refreshes statistics, but only after its
-- thresholds and naptime, and not at all where it is off: so the maintenance
-- leader runs analyze_jobs.sql when this holds, which makes every session plan again.
SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint
           > 2 * greatest(c.relpages, 8)
       AND pg_has_role(c.relowner, 'MEMBER')
FROM pg_class c
WHERE c.oid = '{{schema}}.jobs'::regclass;
