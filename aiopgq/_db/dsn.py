"""Finding and checking the database address; keeping passwords out of messages."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from .._errors import ConfigurationError

# user:password@ right after "://"; the user part holds no blank, so prose after a
# "postgresql://" in a message is not taken for credentials.
_PASSWORD_IN_URL = re.compile(r"(://[^:/@\s]*:)([^@]*)(@)")
# The shape of a database URL, for messages: no password in it, so redact() leaves it whole.
DSN_EXAMPLE = "postgresql://user@host:5432/dbname"


def resolve_dsn(dsn: str | None = None) -> str | None:
    """`dsn`, else `AIOPGQ_DSN`, else `DATABASE_URL`, else None."""
    return dsn or os.environ.get("AIOPGQ_DSN") or os.environ.get("DATABASE_URL") or None


def check_dsn(dsn: str) -> str:
    """Raise ConfigurationError unless `dsn` is a postgres:// or postgresql:// URL."""
    try:
        parts = urlsplit(dsn)
        parts.port  # noqa: B018 - parses the port, raising on garbage
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"cannot parse the database URL {redact(str(dsn))!r} ({exc}): "
            f"use {DSN_EXAMPLE} (a password goes after the user: user:secret@host)"
        ) from None
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigurationError(
            f"cannot parse the database URL {redact(dsn)!r}: it must start with "
            f"postgresql:// (for example {DSN_EXAMPLE})"
        )
    return dsn


def redact(text: str) -> str:
    """`text` with any URL password replaced by ***."""
    return _PASSWORD_IN_URL.sub(r"\1***\3", text)
