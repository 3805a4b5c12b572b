"""`aiopgq schedules`: the periodic tasks' schedules, with their last and next run."""

from __future__ import annotations

import argparse
from datetime import datetime

from .common import AddCommand, queue_of


def register(add: AddCommand) -> None:
    add("schedules", "periodic schedules with their last and next run").set_defaults(
        run=list_schedules
    )


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone().strftime("%Y-%m-%d %H:%M:%S%z")


async def list_schedules(args: argparse.Namespace) -> int:
    async with queue_of(args) as queue:
        await queue.check_schema()
        rows = await queue.schedule_status()
    if not rows:
        print("(no schedules: a worker registers those of its periodic tasks when it starts)")
        return 0
    print(
        f"{'name':<28} {'schedule':<16} {'time zone':<16} {'missed':<7} "
        f"{'last run':<25} {'status':<10} {'next run':<25}"
    )
    for row in rows:
        print(
            f"{row['name']:<28} {row['cron']:<16} {row['timezone']:<16} {row['missed']:<7} "
            f"{_when(row['last_run']):<25} {row['last_status'] or '-':<10} "
            f"{_when(row['next_run']):<25}"
        )
    return 0
