"""`aiopgq partition`: show, switch on or switch off the partitioned layout of finished jobs."""

from __future__ import annotations

import argparse

from .. import ArchiveLayout
from .common import AddCommand, UsageError, queue_of


def register(add: AddCommand) -> None:
    partition = add(
        "partition",
        "the partitioned layout for finished jobs: show it, --enable or --disable it",
    )
    switch = partition.add_mutually_exclusive_group()
    switch.add_argument(
        "--enable",
        action="store_true",
        help="move finished jobs to time-range partitions; retention drops whole partitions",
    )
    switch.add_argument(
        "--disable",
        action="store_true",
        help="keep finished jobs in the jobs table again (the archive stays readable)",
    )
    partition.add_argument(
        "--archive-after",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long a finished job stays in the jobs table before it moves (at least 60)",
    )
    partition.add_argument(
        "--partition-width",
        type=int,
        default=86400,
        metavar="SECONDS",
        help="finish times per partition (86400: a day; at least 60)",
    )
    partition.set_defaults(run=partition_layout)


async def partition_layout(args: argparse.Namespace) -> int:
    changed = args.archive_after != 300.0 or args.partition_width != 86400
    if changed and not args.enable:
        raise UsageError("--archive-after and --partition-width go with --enable")
    async with queue_of(args) as queue:
        await queue.check_schema()
        if args.enable:
            layout = await queue.enable_partitioning(
                archive_after=args.archive_after, partition_width=args.partition_width
            )
        elif args.disable:
            layout = await queue.disable_partitioning()
        else:
            layout = await queue.archive_layout()
    print(describe(layout))
    return 0


def describe(layout: ArchiveLayout) -> str:
    if layout.enabled:
        lines = [
            f"partitioned layout: on since {layout.changed_at:%Y-%m-%d %H:%M:%S %Z}; finished "
            f"jobs move to the archive {layout.archive_after:g} s after they finish, "
            f"{layout.partition_width:g} s of finish times per partition",
        ]
    else:
        lines = ["partitioned layout: off (finished jobs stay in the jobs table until pruned)"]
    if layout.partitions:
        lines.append(f"{'partition':<40} {'status':<9} {'from':<19} {'to':<19} {'rows':>10} size")
        for p in layout.partitions:
            start = "-" if p.from_at is None else f"{p.from_at:%Y-%m-%d %H:%M:%S}"
            rows = "?" if p.rows_estimate < 0 else str(p.rows_estimate)
            lines.append(
                f"{p.name:<40} {p.status:<9} {start:<19} {p.to_at:%Y-%m-%d %H:%M:%S} "
                f"{rows:>10} {_size(p.bytes)}"
            )
    return "\n".join(lines)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    size = count / 1024
    for unit in ("kB", "MB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
