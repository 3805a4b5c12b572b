"""Enqueue retry: how long an enqueue waits out a database it cannot reach.

`Queue(enqueue_retry_for=...)` sets it for every enqueue, the `enqueue_retry_for`
argument of `enqueue`, `enqueue_many` and `copy_many` for one call. What is retried
(`aiopgq._db.retrying.run_pooled_retrying`): an attempt whose connection could not be
made (server down, restarting, out of connections), a statement that certainly never
reached the server, and, when every job of the call has an idempotency key and
`on_conflict="ignore"`, any transient error: a second keyed insert returns the jobs of
the first. Any other insert whose reply was lost is never sent again (it may have
committed): its error is raised. The registry read before an enqueue of a task not
registered here is retried like a keyed insert (a read runs twice harmlessly).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TypeVar

import asyncpg

from .._db.outage import Outage
from .._db.retrying import Operation, run_pooled, run_pooled_retrying
from .._errors import ConfigurationError

T = TypeVar("T")
logger = logging.getLogger("aiopgq.queue")


def retry_seconds(value: float | timedelta | None, name: str = "enqueue_retry_for") -> float:
    """Seconds from a number, a timedelta or None (no retry); ConfigurationError if bad."""
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(f"{name} must be seconds or a timedelta, got {value!r}")
    if not 0 <= seconds <= 86400:
        raise ConfigurationError(f"{name} must be between 0 and 86400 seconds, got {seconds}")
    return seconds


class EnqueueRetry:
    """The queue's default wait, and one account of the outages its enqueues ride out."""

    def __init__(self, retry_for: float | timedelta | None) -> None:
        self.seconds = retry_seconds(retry_for)
        self._outage = Outage()

    def seconds_for(self, override: float | timedelta | None, own_connection: bool) -> float:
        """The wait of one call: its override, else the queue's; none on the caller's
        connection (its transaction is the caller's to retry)."""
        if override is not None:
            seconds = retry_seconds(override)
            if seconds and own_connection:
                raise ConfigurationError(
                    "enqueue_retry_for cannot be used with connection=...: the enqueue is "
                    "part of your transaction, so retry the transaction instead"
                )
            return seconds
        return 0.0 if own_connection else self.seconds

    async def run(
        self, pool: asyncpg.Pool, op: Operation[T], seconds: float, *, idempotent: bool
    ) -> T:
        if not seconds:
            return await run_pooled(pool, op)
        return await run_pooled_retrying(
            pool,
            op,
            retry_for=seconds,
            idempotent=idempotent,
            outage=self._outage,
            logger=logger,
            what="enqueue",
        )
