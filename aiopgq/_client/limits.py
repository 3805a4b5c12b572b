"""Limits: a queue's fleet-wide concurrency, rate and per-key limits (`Queue.configure`)."""

from __future__ import annotations

import enum
import math

import asyncpg

from .._db.connection import Connection
from .._db.key_index import ensure_key_index
from .._db.migrations import missing_schema_as_error
from .._enqueue_options import check_limit, check_queue_name
from .._errors import ConfigurationError, shown
from .._models import QueueSettings
from .core import Core


class Keep(enum.Enum):
    KEEP = "keep"  # configure(): leave this setting as it is


KEEP = Keep.KEEP


class Limits:
    """A queue's fleet-wide limits: configure() and queue_settings()."""

    def __init__(self, core: Core) -> None:
        self._core = core

    async def configure(
        self,
        queue: str,
        *,
        concurrency: int | Keep | None = KEEP,
        rate: float | Keep | None = KEEP,
        burst: int | Keep | None = KEEP,
        key_concurrency: int | Keep | None = KEEP,
    ) -> QueueSettings:
        """Set a queue's limits for every worker; settings not passed keep their value, ..."""
        values = {
            "concurrency": _count("concurrency", concurrency),
            "rate": _rate(rate),
            "burst": _count("burst", burst),
            "key_concurrency": _count("key_concurrency", key_concurrency),
        }
        changed = [name for name, value in values.items() if value is not KEEP]
        args = [None if value is KEEP else value for value in values.values()]
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                if isinstance(values["key_concurrency"], int):
                    await self._ensure_key_index(conn)
                row = await conn.fetchrow(
                    self._core.sql.configure_queue,
                    check_queue_name(queue),
                    *args,
                    changed,
                    self._core.sql.channel,
                )
        assert row is not None
        return _settings(row)

    async def _ensure_key_index(self, conn: Connection) -> None:
        try:
            await ensure_key_index(conn, self._core.sql)
        except asyncpg.InsufficientPrivilegeError as exc:
            raise ConfigurationError(
                f"key limits need an index on {self._core.schema}.jobs that only the owner of the "
                f"table can create ({exc}): configure the first key limit as the role that "
                "ran `aiopgq migrate`"
            ) from exc

    async def queue_settings(self, queue: str) -> QueueSettings:
        """The queue's limits as stored (all None when it has none)."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                row = await conn.fetchrow(self._core.sql.queue_settings, check_queue_name(queue))
        return QueueSettings(queue) if row is None else _settings(row)


def _settings(row: asyncpg.Record) -> QueueSettings:
    return QueueSettings(
        queue=row["queue"],
        concurrency=row["concurrency"],
        rate=row["rate"],
        burst=row["burst"],
        key_concurrency=row["key_concurrency"],
    )


def _count(name: str, value: int | Keep | None) -> int | Keep | None:
    return value if value is KEEP else check_limit(name, value)


def _rate(value: float | Keep | None) -> float | Keep | None:
    if value is None or value is KEEP:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"rate must be a number of jobs per second; got {shown(value)}")
    rate = float(value)
    if not (math.isfinite(rate) and 0 < rate <= 1e9):
        raise ConfigurationError(
            "rate must be > 0 and at most 1e9 jobs per second, or None to remove it; "
            f"got {shown(value)}"
        )
    return rate
