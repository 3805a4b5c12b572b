"""The aiopgq exception hierarchy: every error we raise derives from `Error`."""

from __future__ import annotations


class Error(Exception):
    """Base class of every aiopgq error."""


class ConfigurationError(Error):
    """A setting is invalid (bad DSN, bad schema or queue name, bad option value)."""


class QueueNotOpen(ConfigurationError, RuntimeError):
    """The queue was used before `async with queue:` or `await queue.open()`."""


class SchemaError(Error):
    """The database schema is missing, older or newer than this version of aiopgq."""


class TaskNotFound(Error):
    """A job names a task that is not registered in this process."""


class JobNotFound(Error):
    """No job with that id exists."""


class EmbeddedServerError(Error):
    """The embedded PostgreSQL server could not be found, started or stopped."""
