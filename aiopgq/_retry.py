"""Backoff for failed jobs, and the database errors a worker rides out."""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass

import asyncpg

from ._errors import ConfigurationError


@dataclass(frozen=True)
class Retry:
    """Exponential backoff with a cap and jitter: `base * factor ** (attempt - 1)`.

    >>> @queue.task(retry=Retry(base=1.0, cap=60.0))
    ... async def flaky() -> None: ...
    """

    base: float = 10.0
    factor: float = 2.0
    cap: float = 3600.0
    jitter: float = 0.1  # +/- this fraction, so retries of a failed batch spread out

    def __post_init__(self) -> None:
        values = (self.base, self.factor, self.cap, self.jitter)
        if (
            not all(math.isfinite(v) for v in values)
            or self.base < 0
            or self.factor < 1
            or self.cap < 0
            or not 0 <= self.jitter <= 1
        ):
            raise ConfigurationError(
                f"invalid {self!r}: need finite base >= 0, factor >= 1, cap >= 0, 0 <= jitter <= 1"
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retrying after failed attempt number `attempt` (1-based)."""
        exponent = max(attempt - 1, 0)
        try:
            raw = min(self.cap, self.base * float(self.factor) ** min(exponent, 1100))
        except OverflowError:
            raw = self.cap
        return max(0.0, raw * (1 + random.uniform(-self.jitter, self.jitter)))


# Errors after which the same statement can succeed on a later try: the
# connection or server went away, or PostgreSQL chose us as a deadlock victim.
_TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57", "58")
_TRANSIENT_SQLSTATES = ("40001", "40P01", "55P03")


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry with backoff can cure."""
    # InternalClientError: asyncpg's protocol state after the server dropped the
    # connection between two messages of one query (seen with pg_terminate_backend).
    if isinstance(
        exc, (OSError, asyncio.TimeoutError, asyncpg.InterfaceError, asyncpg.InternalClientError)
    ):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state: str = getattr(exc, "sqlstate", None) or ""
        return state in _TRANSIENT_SQLSTATES or state[:2] in _TRANSIENT_SQLSTATE_CLASSES
    return False


def reconnect_delay(failures: int) -> float:
    """Backoff for reconnect loops: 0.1 s doubling to 5 s, with jitter."""
    return min(5.0, 0.1 * 2.0 ** min(failures, 10)) * random.uniform(0.5, 1.0)
