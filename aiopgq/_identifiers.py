"""The one rule for SQL identifiers we accept (schema and database names)."""

from __future__ import annotations

import re

# Lower case only, so the name never needs case-folding rules to match the catalog,
# and at most 63 bytes (PostgreSQL's NAMEDATALEN - 1). fullmatch, not `^...$`: `$` also
# matches before a trailing newline.
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def is_identifier(name: object) -> bool:
    """True if `name` is a safe lower-case SQL identifier."""
    return isinstance(name, str) and IDENTIFIER.fullmatch(name) is not None
