"""`aiopgq workers`: the workers of the registry, live or not yet expired."""

from __future__ import annotations

import argparse
import json

import asyncpg

from .._db.migrations import check_version
from .._ops.queries import OpsStatements
from .._ops.snapshot import read_workers
from .common import AddCommand, dsn_of, schema_of


def register(add: AddCommand) -> None:
    workers = add("workers", "list the workers of the registry (live, or not yet expired)")
    workers.add_argument("--json", action="store_true", help="the list as JSON")
    workers.set_defaults(run=workers_run)


async def workers_run(args: argparse.Namespace) -> int:
    conn = await asyncpg.connect(dsn_of(args))
    try:
        await check_version(conn, schema_of(args))
        rows = await read_workers(conn, OpsStatements(schema_of(args)))
    finally:
        await conn.close()
    if args.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
        return 0
    if not rows:
        print("(no workers)")
        return 0
    header = f"{'worker':<40} {'host':<16} {'pid':>7} {'queues':<20} {'slots':>7} {'version':<8}"
    print(f"{header} {'up':>8} {'seen':>8}")
    for w in rows:
        print(
            f"{w.id:<40} {w.host:<16} {w.pid:>7} {','.join(w.queues):<20} "
            f"{f'{w.running}/{w.concurrency}':>7} {w.version:<8} {age(w.uptime):>8} "
            f"{age(w.last_seen_age) + ' ago':>8}"
        )
    return 0


def age(seconds: float | None) -> str:
    """A duration for people: 0.4 s, 12 s, 3m20s, 2h05m, 3d04h."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
