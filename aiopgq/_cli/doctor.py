"""`aiopgq doctor`: is the queue's database healthy, and the fix for what is not."""

from __future__ import annotations

import argparse

import asyncpg

from .._ops.checks import Check, Settings
from .._ops.doctor import Report, examine
from .common import AddCommand, dsn_of, schema_of


def register(add: AddCommand) -> None:
    doctor = add("doctor", "check the database for what slows or blocks the queue, and say the fix")
    doctor.add_argument("--json", action="store_true", help="the report as JSON")
    doctor.add_argument(
        "--details", action="store_true", help="also the details of checks that are ok"
    )
    defaults = Settings()
    doctor.add_argument(
        "--idle-threshold",
        type=float,
        metavar="SECONDS",
        default=defaults.idle_threshold,
        help="how long a transaction may stay open",
    )
    doctor.add_argument(
        "--lock-threshold",
        type=float,
        metavar="SECONDS",
        default=defaults.lock_threshold,
        help="how long a statement may wait on a lock",
    )
    doctor.add_argument(
        "--lease-threshold",
        type=float,
        metavar="SECONDS",
        default=defaults.lease_threshold,
        help="how long a running job may go without heartbeat",
    )
    doctor.add_argument(
        "--notify-threshold",
        type=float,
        metavar="FRACTION",
        default=defaults.notify_threshold,
        help="share of the NOTIFY queue that may be in use, 0 to 1",
    )
    doctor.set_defaults(run=doctor_run)


async def doctor_run(args: argparse.Namespace) -> int:
    settings = Settings(
        idle_threshold=args.idle_threshold,
        lock_threshold=args.lock_threshold,
        lease_threshold=args.lease_threshold,
        notify_threshold=args.notify_threshold,
    )
    conn = await asyncpg.connect(
        dsn_of(args), server_settings={"application_name": "aiopgq doctor"}
    )
    try:
        report = await examine(conn, schema_of(args), settings)
    finally:
        await conn.close()
    print(report.as_json() if args.json else format_report(report, details=args.details))
    return 1 if report.needs_action else 0


_MARKS = {"ok": "[ ok ]", "warn": "[warn]", "fail": "[FAIL]", "skip": "[skip]"}


def format_report(report: Report, *, details: bool = False) -> str:
    lines = [f"aiopgq doctor: schema {report.schema}, PostgreSQL {report.server_version}", ""]
    for check in report.checks:
        lines += _format_check(check, details=details)
    needing = [c for c in report.checks if c.verdict in ("warn", "fail")]
    lines.append("")
    lines.append(
        f"{len(needing)} of {len(report.checks)} checks need action."
        if needing
        else "Nothing needs action."
    )
    return "\n".join(lines)


def _format_check(check: Check, *, details: bool) -> list[str]:
    lines = [f"{_MARKS[check.verdict]} {check.title}: {check.summary}"]
    if details or check.verdict in ("warn", "fail"):
        lines += [f"       {line}" for line in check.details]
    if check.fix and check.verdict in ("warn", "fail"):
        lines.append(f"       fix: {check.fix}")
    return lines
