-- Make the archive's partitions up to two widths ahead (see 0018_partitioned_archive.sql).
SELECT {{schema}}.archive_extend();
