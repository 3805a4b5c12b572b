"""`aiopgq migrate`: create or upgrade the schema."""

from __future__ import annotations

import argparse

from .common import AddCommand, queue_of


def register(add: AddCommand) -> None:
    add("migrate", "create or upgrade the schema").set_defaults(run=migrate)


async def migrate(args: argparse.Namespace) -> int:
    queue = queue_of(args)
    applied = await queue.migrate()
    where = f"schema {queue.schema}"
    print(f"applied migrations {applied} to {where}" if applied else f"{where} is up to date")
    return 0
