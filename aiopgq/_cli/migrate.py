"""`aiopgq migrate`, `enqueue` and `status`: the schema and the jobs in it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import AddCommand, UsageError, queue_of

_PAYLOAD_HELP = (
    "JSON object of the task's arguments, e.g. '{\"a\": 1}'; - reads it from standard input, "
    "@FILE from a file (for payloads too large for a command line)"
)


def register(add: AddCommand) -> None:
    add("migrate", "create or upgrade the schema").set_defaults(run=migrate)

    enqueue = add("enqueue", "enqueue a job by task name; prints its id")
    enqueue.add_argument("task", help="the task's name, e.g. demo.add")
    enqueue.add_argument("payload", nargs="?", default="{}", help=_PAYLOAD_HELP)
    enqueue.add_argument("--queue", help="queue to put the job on (default: default)")
    enqueue.add_argument(
        "--priority",
        type=int,
        metavar="N",
        help="higher runs first, a 32-bit integer (default: 0)",
    )
    enqueue.add_argument(
        "--max-attempts",
        type=int,
        metavar="N",
        help="runs before the job ends failed (default: 5)",
    )
    enqueue.add_argument(
        "--delay",
        type=float,
        metavar="SECONDS",
        help="start no sooner than this from now (default: 0, at once)",
    )
    enqueue.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="while a job with this key is pending or running, print its id instead "
        "(default: none)",
    )
    enqueue.add_argument(
        "--concurrency-key",
        metavar="KEY",
        help="the job's key for its queue's per-key limit (`aiopgq queue --key-concurrency`; "
        "default: none)",
    )
    enqueue.add_argument(
        "--max-payload-bytes",
        type=int,
        metavar="BYTES",
        default=1_000_000,
        help="refuse a larger payload",
    )
    enqueue.set_defaults(run=enqueue_job)

    add(
        "status",
        "job counts per queue and status, and the mean progress of running jobs that report it",
    ).set_defaults(run=status)


async def migrate(args: argparse.Namespace) -> int:
    queue = queue_of(args)
    applied = await queue.migrate()
    where = f"schema {queue.schema}"
    print(f"applied migrations {applied} to {where}" if applied else f"{where} is up to date")
    return 0


def read_payload(argument: str) -> dict[str, Any]:
    """The payload argument as a dict: JSON text, `-` for standard input, `@FILE`."""
    source = "the payload"
    if argument == "-":
        text, source = sys.stdin.read(), "the payload on standard input"
    elif argument.startswith("@"):
        path = Path(argument[1:])
        source = f"payload file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {source}: {exc}") from None
    else:
        text = argument
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source} is not valid JSON ({exc}); e.g. '{{\"a\": 1}}'") from None
    if not isinstance(payload, dict):
        raise UsageError(
            f"{source} must be a JSON object of the task's arguments, e.g. '{{\"a\": 1}}'"
        )
    return payload


async def enqueue_job(args: argparse.Namespace) -> int:
    payload = read_payload(args.payload)
    async with queue_of(args, max_payload_bytes=args.max_payload_bytes) as queue:
        job = await queue.enqueue(
            args.task,
            payload,
            queue=args.queue,
            priority=args.priority,
            max_attempts=args.max_attempts,
            delay=args.delay,
            idempotency_key=args.idempotency_key,
            concurrency_key=args.concurrency_key,
        )
    print(job.id)
    return 0


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
