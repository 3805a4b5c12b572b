-- Make the archive's partitions up to two widths ahead (see sql/functions/archive.sql).
SELECT {{schema}}.archive_extend();
