"""Which database errors a retry can cure, and the one backoff loop every component uses."""

from __future__ import annotations

import asyncio
import logging
import random

import asyncpg

from .dsn import redact
from .outage import Outage

# Errors after which the same statement can succeed on a later try: the
# connection or server went away, or PostgreSQL chose us as a deadlock victim.
_TRANSIENT_SQLSTATE_CLASSES = ("08", "53", "57", "58")
_TRANSIENT_SQLSTATES = ("40001", "40P01", "55P03")
# The server ended this session (pg_terminate_backend, shutdown, crash of another backend).
_SESSION_ENDED_SQLSTATES = ("08003", "08006", "57P01", "57P02")


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


def never_sent(exc: BaseException) -> bool:
    """True when `exc` proves that the statement never reached the server, so sending it
    again cannot run it twice. asyncpg raises these before it writes anything:

    - "cannot switch to state N; another operation (2) is in progress": the server's
      goodbye (the FATAL error of pg_terminate_backend, a shutdown, an idle timeout)
      reached the connection between two statements. asyncpg parks the protocol in its
      error state, and until it reads the end of the stream a loop iteration or more
      later the connection still looks open: the pool hands it out and the next
      statement stops at this check (MagicStack/asyncpg#1069).
    - "connection is closed" / "released back to the pool": the connection was gone
      before the statement started.
    """
    if isinstance(exc, asyncpg.InternalClientError):
        return str(exc).startswith("cannot switch to state")
    if isinstance(exc, asyncpg.InterfaceError):
        message = str(exc)
        return message.endswith("connection is closed") or "released back to the pool" in message
    return False


def connection_lost(exc: BaseException) -> bool:
    """True when `exc` says this connection is gone (the server may be fine): a new
    connection can be tried at once."""
    if never_sent(exc) or isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return True
    return isinstance(exc, asyncpg.PostgresError) and (
        getattr(exc, "sqlstate", None) in _SESSION_ENDED_SQLSTATES
    )


def describe(exc: BaseException) -> str:
    """`exc` for a log line or an error message: no password, and asyncpg's internal
    wording replaced by what happened."""
    if isinstance(exc, asyncpg.InternalClientError) and never_sent(exc):
        return "the server closed the connection"
    if getattr(exc, "sqlstate", None) == "53300":
        return (
            f"{redact(str(exc))}: the server's max_connections are all in use; "
            "close idle sessions or raise max_connections"
        )
    return redact(str(exc)) or type(exc).__name__


def reconnect_delay(failures: int) -> float:
    """Backoff for reconnect loops: 0.1 s doubling to 5 s, with jitter."""
    return min(5.0, 0.1 * 2.0 ** min(failures, 10)) * random.uniform(0.5, 1.0)


class Backoff:
    """The consecutive failures of one retrying loop, and what to log about them.

    `failed(exc)` re-raises an error no retry can cure, else returns how long to wait.
    A lost connection (a killed backend) is retried at once and logged at INFO; if that
    retry fails too, the database is in trouble: the `Outage` (shared by the parts of
    one worker) logs one WARNING when it starts, a reminder at most every 30 s while it
    lasts, and one INFO with its duration when the last failing loop works again.

    >>> backoff = Backoff(logger, "fetching jobs")
    >>> try: ...; backoff.succeeded()
    ... except Exception as exc: await anyio.sleep(backoff.failed(exc))
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        consequence: str = "",
        interval: float | None = None,
        outage: Outage | None = None,
    ) -> None:
        self._logger = logger
        self._what = what
        self._consequence = consequence  # e.g. "polling meanwhile"
        self._interval = interval  # a periodic loop retries at its next round, not sooner
        self._outage = outage if outage is not None else Outage()
        self._reconnected = False  # the last failure was a lost connection, retried at once
        self.failures = 0

    def failed(self, exc: BaseException, *, retry_any: bool = False) -> float:
        """Count a failure; raise `exc` unless it is transient (or `retry_any`); the delay
        before retrying (0 for a connection that was lost while the loop worked)."""
        if not retry_any and not is_transient(exc):
            raise exc
        reason = describe(exc)
        if not self.failures and not self._reconnected and connection_lost(exc):
            self._reconnected = True
            self._logger.info("%s: connection lost (%s); reconnecting at once", self._what, reason)
            return 0.0
        self.failures += 1
        delay = self._interval if self._interval is not None else reconnect_delay(self.failures)
        self._outage.failing(self._logger, self._what, reason, delay, self._consequence)
        return delay

    def succeeded(self) -> None:
        """The loop works again: log how long it did not, if it did not."""
        self._reconnected = False
        if self.failures:
            self.failures = 0
            self._outage.working(self._logger, self._what)

    def idle(self) -> None:
        """The loop has nothing left to retry (its work went away): it no longer counts
        as failing."""
        self.succeeded()
