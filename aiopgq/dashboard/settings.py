"""What one dashboard app shows and allows, shared by its pages and actions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiopgq import Queue

# The environment variable `aiopgq dashboard` reads the action token from.
TOKEN_ENV = "AIOPGQ_DASHBOARD_TOKEN"


@dataclass(frozen=True)
class Settings:
    """What one dashboard app shows and allows."""

    queue: Queue
    token: str | None
    read_only: bool
    poll_interval: float
    window: float
    require_token_for_reads: bool = False
    _opening: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    @property
    def actions(self) -> bool:
        """Whether the action buttons work (a token is set and the app is not read-only)."""
        return self.token is not None and not self.read_only

    async def open_queue(self) -> Queue:
        """The queue, opened on first use if its owner has not opened it (mounted apps
        get no lifespan of their own); one pool even when requests arrive together."""
        if not self.queue.is_open:
            async with self._opening:
                if not self.queue.is_open:
                    await self.queue.open()
        return self.queue
