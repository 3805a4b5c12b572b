"""`aiopgq status`: job counts per queue and status, and the paused queues."""

from __future__ import annotations

import argparse

from .common import AddCommand, queue_of


def register(add: AddCommand) -> None:
    add(
        "status",
        "job counts per queue and status, and the mean progress of running jobs that report it",
    ).set_defaults(run=status)


async def status(args: argparse.Namespace) -> int:
    async with queue_of(args) as queue:
        await queue.check_schema()
        rows = await queue.status()
        paused = await queue.paused_queues()
    print(f"{'queue':<20} {'status':<10} {'jobs':>10} {'oldest runnable':>16} {'progress':>9}")
    for row in rows:
        age, progress = row["oldest_runnable_age"], row["progress"]
        print(
            f"{row['queue']:<20} {row['status']:<10} {row['jobs']:>10} "
            f"{'' if age is None else f'{age:.1f} s':>16} "
            f"{'' if progress is None else f'{progress:.0%}':>9}"
        )
    if not rows:
        print("(no jobs)")
    if paused:
        print(f"paused queues: {', '.join(paused)} (`aiopgq resume QUEUE` to resume)")
    return 0
