"""A worker application whose handler fails with the database URL in its message."""

from __future__ import annotations

import os

from aiopgq import Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])


@queue.task(name="secrets.quote_the_dsn", max_attempts=1)
async def quote_the_dsn() -> None:
    raise RuntimeError(f"cannot reach {os.environ['AIOPGQ_DSN']}")
