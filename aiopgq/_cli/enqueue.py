"""`aiopgq enqueue`: enqueue a job by task name, its payload from the command line or a file."""

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
        "--sequence-key",
        metavar="KEY",
        help="run after the jobs enqueued before it with this key, one at a time; a failed "
        "one holds the rest until retried or cancelled (default: none)",
    )
    enqueue.add_argument(
        "--max-payload-bytes",
        type=int,
        metavar="BYTES",
        default=1_000_000,
        help="refuse a larger payload",
    )
    enqueue.set_defaults(run=enqueue_job)


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
            sequence_key=args.sequence_key,
        )
    print(job.id)
    return 0
