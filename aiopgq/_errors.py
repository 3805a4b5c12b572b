"""The aiopgq exception hierarchy: every error we raise derives from `Error`."""

from __future__ import annotations

from collections.abc import Sequence

# Characters of a user's value that an error message shows: a 1 MB queue name makes a
# one-line message, not a 1 MB one.
SHOWN_CHARACTERS = 60


def shown(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """`value` as an error message quotes what the user gave: its repr, cut to its first
    `limit` characters when longer, with its length.

    >>> shown("abcdef", limit=3)
    "'abc'... (6 characters)"
    """
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    return cut(repr(value), limit)


def cut(text: str, limit: int = SHOWN_CHARACTERS) -> str:
    """`text` cut to its first `limit` characters when longer, with its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class Error(Exception):
    """Base class of every aiopgq error."""


class ConfigurationError(Error):
    """A setting is invalid (bad DSN, bad schema or queue name, bad option value)."""


class CannotConnect(ConfigurationError):
    """The database server could not be reached, or refused the connection (it is down,
    the host or port is wrong, or the password): a failure of the moment, which the CLI
    reports with exit status 1 where other setting errors are usage mistakes (2)."""


class QueueNotOpen(ConfigurationError, RuntimeError):
    """The queue was used before `async with queue:` or `await queue.open()`."""


class SchemaError(Error):
    """The database schema is missing, older or newer than this version of aiopgq."""


class TaskNotFound(Error):
    """No task of that name is registered: refused at enqueue by name when workers
    registered other tasks (`known` lists them), or unknown to the worker running it.

    >>> try: await queue.enqueue("mail.sned", {})
    ... except TaskNotFound as exc: print(exc.known)  # ['mail.send', ...]

    Args:
        message: what happened and what to do.
        task: the name that was not found (default "").
        known: the task names that are registered, kept as the list `known` (default none).
    """

    def __init__(self, message: str, *, task: str = "", known: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.task = task
        self.known = list(known)


class PayloadTooLarge(Error, ValueError):
    """The database refused a payload over its size limit (the insert trigger's
    jobs_payload_max_bytes check; SQL functions max_payload_bytes() and
    set_max_payload_bytes(n))."""


class JobNotFound(Error):
    """No job with that id exists."""


class WorkflowNotFound(Error):
    """No workflow with that id exists."""


class EmbeddedServerError(Error):
    """The embedded PostgreSQL server could not be found, started or stopped."""


class LeaseLost(Error):
    """This run of the job no longer holds its lease (it expired and the job was rescued,
    maybe claimed by another worker): `ctx.transaction()` rolled back instead of
    committing, and a worker that cannot renew its leases cancels the handler.

    >>> async with ctx.transaction() as conn: ...  # LeaseLost: nothing was committed
    >>> "LeaseLost" in (await queue.get_job(job_id)).last_error  # a fenced run's error
    """


class StepMismatch(Error):
    """A handler's durable steps do not match the ones an earlier run of its job recorded:
    at the same place it calls another step (or a step of that name elsewhere). Raised by
    `ctx.step`, `ctx.sleep` and `ctx.wait_event` instead of replaying a value the handler
    may not mean; the job's retry policy applies (a new deploy can fix it, or cancel the
    job and enqueue a new one).

    >>> await ctx.step("charge", charge)  # StepMismatch: an earlier run recorded "reserve"
    """


class Snooze(Error):
    """Raise in a handler to put its job back for `seconds` without counting a failed
    attempt; a job snoozes at most its task's `max_snoozes` times (default 100), after
    which a snooze counts as a failed attempt.

    >>> if not await upstream_ready():
    ...     raise aiopgq.Snooze(30)  # run again in 30 s

    Args:
        seconds: how long the job waits before it runs again, in seconds (0 to 10 years).

    Raises:
        TypeError: `seconds` is not a number (an int or a float; not a bool).
        ValueError: `seconds` is negative or over 10 years.
    """

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"Snooze(seconds): a number of seconds, got {seconds!r}")
        if not 0 <= seconds <= 10 * 365 * 86400:
            raise ValueError(f"Snooze(seconds): between 0 and 10 years, got {seconds}")
        super().__init__(seconds)
        self.seconds = float(seconds)

    def __str__(self) -> str:
        return f"snoozed for {self.seconds:g} s"


class Abort(Error):
    """Raise in a handler to fail its job at once, with no retry left; the reason is
    its last_error and goes into its history.

    >>> if order.cancelled:
    ...     raise aiopgq.Abort("order was cancelled")

    Args:
        reason: why, stored as the job's last_error (default "aborted").
    """

    def __init__(self, reason: str = "aborted") -> None:
        super().__init__(reason)
        self.reason = str(reason)
