"""Finding and checking the database address; keeping passwords out of messages."""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from .._errors import ConfigurationError, cut, shown

# A URL and everything up to the next blank: the last "@" in it ends the user info, so
# a password holding "@", ":" or "/" unencoded is hidden whole (hiding some host or path
# with it, when a later "@" sits in the path or query, is the safe side).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
# A query parameter: its value runs to the next "&name=" or "?name=" (a raw "&" inside a
# password stays hidden) or the end of the URL.
_QUERY_PARAMETER = re.compile(r"([?&;])([^=&?;\s]*)=(.*?)(?=[&?;][A-Za-z_%][A-Za-z0-9_%.-]*=|$)")
# keyword=value as libpq reads it: blanks around "=", a value in single quotes with
# backslash escapes (an unclosed quote hides the rest of the text), else up to a blank.
_KEYWORD_VALUE = re.compile(
    r"([A-Za-z0-9_%.-]+)(\s*=\s*)('(?:[^'\\]|\\.)*(?:'|\\?$)|[^\s']\S*|(?=\s|$))", re.DOTALL
)
# Names whose values are secrets: password and sslpassword for libpq; passfile (a path)
# and token/secret names too, since hiding a harmless value costs nothing.
_SECRET_NAME = re.compile(r"pass|secret|token", re.IGNORECASE)
_HIDDEN = "***"

# The shape of a database URL, for messages: no password in it, so redact() leaves it whole.
DSN_EXAMPLE = "postgresql://user@host:5432/dbname"
# A DSN is longer than most names and its end (host, port, options) matters as much.
DSN_CHARACTERS = 200


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
            f"cannot parse the database URL {shown(redact(str(dsn)), DSN_CHARACTERS)} "
            f"({cut(str(exc), DSN_CHARACTERS)}): "
            f"use {DSN_EXAMPLE} (a password goes after the user: user:secret@host)"
        ) from None
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigurationError(
            f"cannot parse the database URL {shown(redact(dsn), DSN_CHARACTERS)}: it must "
            "start with "
            f"postgresql:// (for example {DSN_EXAMPLE})"
        )
    if parts.netloc.count("@") > 1:  # asyncpg would split at the first: a wrong host
        raise ConfigurationError(
            f"cannot parse the database URL {shown(redact(dsn), DSN_CHARACTERS)}: its user "
            "info holds an @; "
            "percent-encode @, :, / and % in the user and password (@ is %40)"
        )
    return dsn


def redact(text: str) -> str:
    """`text` with every password replaced by ***: in URLs (user info and query string,
    also inside longer messages) and in libpq keyword=value strings."""
    out: list[str] = []
    start = 0
    for url in _URL.finditer(text):
        out += [_redact_keywords(text[start : url.start()]), _redact_url(url.group())]
        start = url.end()
    out.append(_redact_keywords(text[start:]))
    return "".join(out)


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    userinfo, at, after = rest.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        rest = f"{user}:{_HIDDEN}@{after}" if colon else rest
    return f"{scheme}://" + _QUERY_PARAMETER.sub(_hide_parameter, rest)


def _hide_parameter(match: re.Match[str]) -> str:
    separator, name, _value = match.groups()
    if _SECRET_NAME.search(unquote(name)):
        return f"{separator}{name}={_HIDDEN}"
    return match.group()


def _redact_keywords(text: str) -> str:
    return _KEYWORD_VALUE.sub(_hide_keyword, text)


def _hide_keyword(match: re.Match[str]) -> str:
    name, equals, _value = match.groups()
    if _SECRET_NAME.search(unquote(name)):
        return f"{name}{equals}{_HIDDEN}"
    return match.group()
