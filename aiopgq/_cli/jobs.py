"""`aiopgq migrate`, `enqueue` and `status`: the schema and the jobs in it."""

from __future__ import annotations

import argparse
import json

from .common import AddCommand, UsageError, queue_of


def register(add: AddCommand) -> None:
    add("migrate", "create or upgrade the schema").set_defaults(run=migrate)

    enqueue = add("enqueue", "enqueue a job by task name")
    enqueue.add_argument("task")
    enqueue.add_argument("payload", nargs="?", default="{}", help="JSON object of arguments")
    enqueue.add_argument("--queue", default=None)
    enqueue.add_argument("--priority", type=int, default=None)
    enqueue.add_argument("--delay", type=float, default=None, help="seconds from now")
    enqueue.set_defaults(run=enqueue_job)

    add("status", "job counts per queue and status").set_defaults(run=status)


async def migrate(args: argparse.Namespace) -> int:
    queue = queue_of(args)
    applied = await queue.migrate()
    where = f"schema {queue.schema}"
    print(f"applied migrations {applied} to {where}" if applied else f"{where} is up to date")
    return 0


async def enqueue_job(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"payload is not valid JSON ({exc}); e.g. '{{\"a\": 1}}'") from None
    if not isinstance(payload, dict):
        raise UsageError("payload must be a JSON object of the task's arguments, e.g. '{\"a\": 1}'")
    async with queue_of(args) as queue:
        job = await queue.enqueue(
            args.task, payload, queue=args.queue, priority=args.priority, delay=args.delay
        )
    print(job.id)
    return 0


async def status(args: argparse.Namespace) -> int:
    async with queue_of(args) as queue:
        await queue.check_schema()
        rows = await queue.status()
    print(f"{'queue':<20} {'status':<10} {'jobs':>10} {'oldest runnable':>16}")
    for row in rows:
        age = row["oldest_runnable_age"]
        print(
            f"{row['queue']:<20} {row['status']:<10} {row['jobs']:>10} "
            f"{'' if age is None else f'{age:.1f} s':>16}"
        )
    if not rows:
        print("(no jobs)")
    return 0
