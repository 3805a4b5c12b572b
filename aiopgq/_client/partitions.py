"""The partitioned layout, from the client: switch it on or off, and look at the archive."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from .._db.migrations import missing_schema_as_error
from .core import QueueCore


@dataclass(frozen=True)
class ArchivePartition:
    """One partition of the archive: finished jobs of one status, by finished_at."""

    status: str
    from_at: datetime | None  # None: the first one, from the beginning of time
    to_at: datetime
    name: str
    rows_estimate: int  # from the table's statistics; -1 before its first ANALYZE
    bytes: int


@dataclass(frozen=True)
class ArchiveLayout:
    """Whether finished jobs move to the partitioned archive, and its partitions.

    >>> layout = await queue.archive_layout()
    >>> layout.enabled, [p.name for p in layout.partitions]
    """

    enabled: bool
    archive_after: float  # seconds a finished job stays in the jobs table
    partition_width: float  # seconds of finished_at per partition
    changed_at: datetime
    partitions: tuple[ArchivePartition, ...]


class Archive(QueueCore):
    async def enable_partitioning(
        self,
        *,
        archive_after: float | timedelta = 300,
        partition_width: float | timedelta = timedelta(days=1),
    ) -> ArchiveLayout:
        """Switch on the partitioned layout for finished jobs (for tens of millions of jobs
        a day): the workers' maintenance moves each job finished `archive_after` ago out
        of the jobs table into time-range partitions, and retention drops whole
        partitions instead of deleting rows. Existing finished jobs move over in batches.

        >>> await queue.enable_partitioning(archive_after=300, partition_width=86400)
        >>> await queue.disable_partitioning()  # back to the plain layout
        """
        after = _seconds(archive_after, "archive_after", minimum=60)
        width = _seconds(partition_width, "partition_width", minimum=60)
        if width != int(width):
            raise ValueError(f"partition_width must be whole seconds, got {width!r}")
        async with self.pool.acquire() as conn, conn.transaction():
            with missing_schema_as_error(self.schema):
                await conn.execute(self.sql.set_archive_layout, True, after, int(width))
                await conn.fetchval(self.sql.archive_extend)
        return await self.archive_layout()

    async def disable_partitioning(self) -> ArchiveLayout:
        """Back to the plain layout: finished jobs stay in the jobs table and are pruned
        there. Jobs archived so far stay readable; their partitions are dropped as they
        pass the retention.

        >>> await queue.disable_partitioning()
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                await conn.execute(self.sql.set_archive_layout, False, None, None)
        return await self.archive_layout()

    async def archive_layout(self) -> ArchiveLayout:
        """The layout's settings and the archive's partitions, oldest first per status.

        >>> print((await queue.archive_layout()).enabled)
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                rows = await conn.fetch(self.sql.archive_partitions)
        first = rows[0]
        partitions = tuple(
            ArchivePartition(
                status=row["status"],
                from_at=None if row["from_at"].tzinfo is None else row["from_at"],
                to_at=row["to_at"],
                name=row["name"],
                rows_estimate=row["rows_estimate"],
                bytes=row["bytes"],
            )
            for row in rows
            if row["name"] is not None
        )
        return ArchiveLayout(
            enabled=first["enabled"],
            archive_after=first["archive_after"],
            partition_width=float(first["partition_width"]),
            changed_at=first["changed_at"],
            partitions=partitions,
        )


def _seconds(value: float | timedelta, name: str, *, minimum: float) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds or a timedelta, got {value!r}")
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be at least {minimum:g} seconds, got {value!r}")
    return float(value)
