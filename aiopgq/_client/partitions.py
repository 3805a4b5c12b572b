"""The partitioned layout, from the client: switch it on or off, and look at the archive."""

from __future__ import annotations

import math
from datetime import timedelta

from .._db.migrations import missing_schema_as_error
from .._models import ArchiveLayout, ArchivePartition
from .core import Core


class Partitions:
    """The partitioned layout of finished jobs: switch it on or off, read its partitions."""

    def __init__(self, core: Core) -> None:
        self._core = core

    async def enable_partitioning(
        self,
        *,
        archive_after: float | timedelta = 300,
        partition_width: float | timedelta = timedelta(days=1),
    ) -> ArchiveLayout:
        """Switch on the partitioned layout for finished jobs (for tens of millions of jobs ..."""
        after = _seconds(archive_after, "archive_after", minimum=60)
        width = _seconds(partition_width, "partition_width", minimum=60)
        if width != int(width):
            raise ValueError(f"partition_width must be whole seconds, got {width!r}")
        async with self._core.pool.acquire() as conn, conn.transaction():
            with missing_schema_as_error(self._core.schema):
                await conn.execute(self._core.sql.set_archive_layout, True, after, int(width))
                await conn.fetchval(self._core.sql.archive_extend)
        return await self.archive_layout()

    async def disable_partitioning(self) -> ArchiveLayout:
        """Back to the plain layout: finished jobs stay in the jobs table and are pruned ..."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                await conn.execute(self._core.sql.set_archive_layout, False, None, None)
        return await self.archive_layout()

    async def archive_layout(self) -> ArchiveLayout:
        """The layout's settings and the archive's partitions, oldest first per status."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                rows = await conn.fetch(self._core.sql.archive_partitions)
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
