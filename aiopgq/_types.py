"""Type aliases shared by the modules."""

from __future__ import annotations

from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

# A connection of our own or one borrowed from a pool (the caller's or ours).
Connection: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"
