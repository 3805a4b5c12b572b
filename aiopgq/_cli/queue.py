"""`aiopgq queue NAME`: show or set a queue's limits, which hold across every worker."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .._errors import shown
from .common import AddCommand, queue_of


def register(add: AddCommand) -> None:
    command = add("queue", "show or set a queue's limits (they hold across every worker)")
    command.add_argument("name", help="the queue")
    for option, kind, metavar, meaning in (
        ("concurrency", int, "N", "at most N jobs of the queue running at once"),
        ("rate", float, "R", "at most R job starts per second on average"),
        ("burst", int, "B", "at most B starts at once under --rate (default: 1 s worth)"),
        ("key-concurrency", int, "K", "at most K running jobs per concurrency key"),
    ):
        command.add_argument(
            f"--{option}",
            type=_limit(kind),
            default=argparse.SUPPRESS,
            metavar=metavar,
            help=f"{meaning}; 'none' removes it",
        )
    command.set_defaults(run=configure)


def _limit(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:  # argparse reports a bad value with the usage
        if text.lower() == "none":
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"takes a number or 'none', not {shown(text)}"
            ) from None

    return parse


async def configure(args: argparse.Namespace) -> int:
    changes = {
        name: getattr(args, name)
        for name in ("concurrency", "rate", "burst", "key_concurrency")
        if hasattr(args, name)
    }
    async with queue_of(args) as queue:
        await queue.check_schema()
        if changes:
            settings = await queue.configure(args.name, **changes)
        else:
            settings = await queue.queue_settings(args.name)
    print(f"queue {settings.queue}")
    for name in ("concurrency", "rate", "burst", "key_concurrency"):
        value = getattr(settings, name)
        print(f"  {name:<16} {'none' if value is None else value}")
    return 0
