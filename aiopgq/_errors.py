"""The aiopgq exception hierarchy: every error we raise derives from `Error`."""

from __future__ import annotations

from collections.abc import Sequence


class Error(Exception):
    """Base class of every aiopgq error."""


class ConfigurationError(Error):
    """A setting is invalid (bad DSN, bad schema or queue name, bad option value)."""


class QueueNotOpen(ConfigurationError, RuntimeError):
    """The queue was used before `async with queue:` or `await queue.open()`."""


class SchemaError(Error):
    """The database schema is missing, older or newer than this version of aiopgq."""


class TaskNotFound(Error):
    """No task of that name is registered: refused at enqueue by name when workers
    registered other tasks (`known` lists them), or unknown to the worker running it.

    >>> try: await queue.enqueue("mail.sned", {})
    ... except TaskNotFound as exc: print(exc.known)  # ['mail.send', ...]
    """

    def __init__(self, message: str, *, task: str = "", known: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.task = task
        self.known = list(known)


class JobNotFound(Error):
    """No job with that id exists."""


class EmbeddedServerError(Error):
    """The embedded PostgreSQL server could not be found, started or stopped."""
