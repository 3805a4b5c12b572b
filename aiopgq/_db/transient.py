"""Which database errors a retry can cure, and the one backoff loop every component uses."""

from __future__ import annotations

import asyncio
import logging
import random
import time

import asyncpg

from .dsn import redact

# Errors after which the same statement can succeed on a later try: the
# connection or server went away, or PostgreSQL chose us as a deadlock victim.
_TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57", "58")
_TRANSIENT_SQLSTATES = ("40001", "40P01", "55P03")

# While failures go on, repeat the warning at most this often.
_REMIND_EVERY = 30.0


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


class Backoff:
    """The consecutive failures of one retrying loop, and what to log about them.

    `failed(exc)` re-raises an error no retry can cure, else returns how long to wait.
    An outage reads as one WARNING when it starts, a reminder at most every 30 s
    while it lasts, and one INFO with its duration when `succeeded()` ends it.

    >>> backoff = Backoff(logger, "fetching jobs")
    >>> try: ...; backoff.succeeded()
    ... except Exception as exc: await anyio.sleep(backoff.failed(exc))
    """

    def __init__(self, logger: logging.Logger, what: str, *, consequence: str = "") -> None:
        self._logger = logger
        self._what = what
        self._consequence = consequence  # e.g. "polling meanwhile"
        self.failures = 0
        self._since = 0.0
        self._reminded = 0.0

    def failed(self, exc: BaseException, *, retry_any: bool = False) -> float:
        """Count a failure; raise `exc` unless it is transient (or `retry_any`); the delay
        before retrying."""
        if not retry_any and not is_transient(exc):
            raise exc
        now = time.monotonic()
        self.failures += 1
        delay = reconnect_delay(self.failures)
        reason = redact(str(exc)) or type(exc).__name__
        then = f"; {self._consequence}" if self._consequence else ""
        if self.failures == 1:
            self._since = self._reminded = now
            self._logger.warning(
                "%s failed (%s); retrying in %.1f s%s", self._what, reason, delay, then
            )
        elif now - self._reminded >= _REMIND_EVERY:
            self._reminded = now
            self._logger.warning(
                "%s still failing after %.0f s and %d tries (%s); retrying%s",
                self._what,
                now - self._since,
                self.failures,
                reason,
                then,
            )
        else:
            self._logger.debug("%s failed again (%s)", self._what, reason)
        return delay

    def succeeded(self) -> None:
        """The loop works again: log how long it did not, if it did not."""
        if self.failures:
            self._logger.info(
                "%s works again after %.1f s and %d failed tries",
                self._what,
                time.monotonic() - self._since,
                self.failures,
            )
            self.failures = 0
