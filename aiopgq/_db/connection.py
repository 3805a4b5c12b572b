"""The connection type of public signatures: our own, or one borrowed from a pool."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, Union

import asyncpg
from asyncpg.pool import PoolConnectionProxy

if TYPE_CHECKING:
    Connection: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"
else:  # asyncpg's classes are generic in the stubs only
    Connection = Union[asyncpg.Connection, PoolConnectionProxy]  # noqa: UP007
