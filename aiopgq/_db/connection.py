"""The connection type of public signatures, and closing the connections we own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, Union

import anyio
import asyncpg
from asyncpg.pool import PoolConnectionProxy

if TYPE_CHECKING:
    Connection: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"
else:  # asyncpg's classes are generic in the stubs only
    Connection = Union[asyncpg.Connection, PoolConnectionProxy]  # noqa: UP007
"""The type of the `connection=` arguments: an asyncpg connection, or one acquired from a pool."""


async def close_quietly(conn: asyncpg.Connection[Any]) -> None:
    """Close a connection we own, shielded from cancellation; a dead or slow one is
    terminated instead (nothing to say about it: its loss was reported already)."""
    if conn.is_closed():
        return
    with anyio.CancelScope(shield=True):
        try:
            with anyio.fail_after(2):
                await conn.close()
        except Exception:
            conn.terminate()
