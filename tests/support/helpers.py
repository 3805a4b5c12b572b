"""Small helpers shared by the tests."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    condition: Callable[[], Awaitable[Any] | Any], *, within: float = 20.0, every: float = 0.02
) -> Any:
    """Poll `condition` (sync or async) until it returns something truthy; fail after `within` s."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(every)
