-- Switch the partitioned layout on ($1 true, with archive_after $2 and partition_width
-- $3 seconds) or off ($1 false: nothing more is moved; archived jobs stay readable and
-- their partitions are dropped as they expire).
UPDATE {{schema}}.archive_layout
SET enabled = $1,
    archive_after = coalesce($2, archive_after),
    partition_width = coalesce($3, partition_width),
    changed_at = now();
