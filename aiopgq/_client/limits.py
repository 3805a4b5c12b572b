"""Limits: a queue's fleet-wide concurrency, rate and per-key limits (`Queue.configure`)."""

from __future__ import annotations

import enum
import logging
import math
from dataclasses import dataclass

import asyncpg

from .._db.connection import Connection
from .._db.migrations import missing_schema_as_error
from .._errors import ConfigurationError
from .._options import check_queue_name
from .core import QueueCore


class _Keep(enum.Enum):
    KEEP = "keep"  # configure(): leave this setting as it is


KEEP = _Keep.KEEP

logger = logging.getLogger("aiopgq.queue")


@dataclass(frozen=True)
class QueueSettings:
    """The limits of one queue, across every worker (None: no such limit).

    >>> settings = await queue.configure("exports", concurrency=3)
    >>> settings.concurrency
    """

    queue: str
    concurrency: int | None = None
    rate: float | None = None
    burst: int | None = None
    key_concurrency: int | None = None

    @property
    def limited(self) -> bool:
        """True if workers claim this queue through its limits."""
        return any(v is not None for v in (self.concurrency, self.rate, self.key_concurrency))


class Limits(QueueCore):
    async def configure(
        self,
        queue: str,
        *,
        concurrency: int | _Keep | None = KEEP,
        rate: float | _Keep | None = KEEP,
        burst: int | _Keep | None = KEEP,
        key_concurrency: int | _Keep | None = KEEP,
    ) -> QueueSettings:
        """Set a queue's limits for every worker; settings not passed keep their value,
        None removes one. Workers apply a change at their next claim (a NOTIFY tells
        them; they also look every poll interval).

        - `concurrency`: at most this many jobs of the queue run at once.
        - `rate`, `burst`: job starts per second on average, at most `burst` at once
          (a token bucket; default burst: one second's worth of the rate).
        - `key_concurrency`: at most this many running jobs per `concurrency_key`, and
          claims take turns over the keys. The first key limit of the schema builds an
          index of pending jobs by key (CONCURRENTLY: may take a while on a large table,
          blocks nothing), as the owner of the tables.

        >>> await queue.configure("exports", concurrency=3, rate=50.0, burst=10)
        >>> await queue.configure("exports", rate=None)  # the rate limit goes
        """
        values = {
            "concurrency": _count("concurrency", concurrency),
            "rate": _rate(rate),
            "burst": _count("burst", burst),
            "key_concurrency": _count("key_concurrency", key_concurrency),
        }
        changed = [name for name, value in values.items() if value is not KEEP]
        args = [None if value is KEEP else value for value in values.values()]
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                if isinstance(values["key_concurrency"], int):
                    await self._ensure_key_index(conn)
                row = await conn.fetchrow(
                    self.sql.configure_queue,
                    check_queue_name(queue),
                    *args,
                    changed,
                    self.sql.channel,
                )
        assert row is not None
        return _settings(row)

    async def _ensure_key_index(self, conn: Connection) -> None:
        """Build the index of pending jobs by key (sql/key_index.sql) unless it exists."""
        valid = await conn.fetchval(self.sql.key_index_state, self.schema)
        if valid:
            return
        logger.info("building index %s.jobs_pending_key_idx for key limits", self.schema)
        try:
            if valid is False:  # a build that failed half-way left an unusable index
                await conn.execute(self.sql.drop_key_index)
            await conn.execute(self.sql.key_index)
        except asyncpg.InsufficientPrivilegeError as exc:
            raise ConfigurationError(
                f"key limits need an index on {self.schema}.jobs that only the owner of the "
                f"table can create ({exc}): configure the first key limit as the role that "
                "ran `aiopgq migrate`"
            ) from exc
        except asyncpg.DuplicateTableError:
            pass  # built by a concurrent configure()

    async def queue_settings(self, queue: str) -> QueueSettings:
        """The queue's limits as stored (all None when it has none).

        >>> (await queue.queue_settings("exports")).concurrency
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                row = await conn.fetchrow(self.sql.queue_settings, check_queue_name(queue))
        return QueueSettings(queue) if row is None else _settings(row)


def _settings(row: asyncpg.Record) -> QueueSettings:
    return QueueSettings(
        queue=row["queue"],
        concurrency=row["concurrency"],
        rate=row["rate"],
        burst=row["burst"],
        key_concurrency=row["key_concurrency"],
    )


def _count(name: str, value: int | _Keep | None) -> int | _Keep | None:
    if value is None or value is KEEP:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{name} must be an int >= 1, or None to remove the limit; got {value!r}"
        )
    if value > 2**31 - 1:
        raise ConfigurationError(f"{name} must fit in 32 bits; got {value}")
    return value


def _rate(value: float | _Keep | None) -> float | _Keep | None:
    if value is None or value is KEEP:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"rate must be a number of jobs per second; got {value!r}")
    rate = float(value)
    if not (math.isfinite(rate) and 0 < rate <= 1e9):
        raise ConfigurationError(
            f"rate must be > 0 and at most 1e9 jobs per second, or None to remove it; got {value!r}"
        )
    return rate
