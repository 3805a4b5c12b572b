"""Events: a producer's side of `ctx.wait_event` (sql/functions/events.sql)."""

from __future__ import annotations

from typing import Any

from .._db.connection import Connection
from .._db.migrations import missing_schema_as_error
from .._payload import encode_result
from .core import Core


def event_arguments(name: str, payload: Any) -> tuple[str, str | None]:
    """The checked name and the payload as JSON text, for emit_event.sql."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"emit_event: the event name must be a non-empty string, got {name!r}")
    try:
        return name, encode_result(payload)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"emit_event: the payload cannot be stored as JSON ({exc})") from None


async def emit_event(core: Core, name: str, payload: Any, connection: Connection | None) -> int:
    """Emit event `name`: keep it, wake its waiting jobs; returns how many it woke."""
    name, text = event_arguments(name, payload)
    async with core.connection(connection) as conn:
        with missing_schema_as_error(core.schema):
            woken: int = await conn.fetchval(core.sql.emit_event, name, text)
    return woken
