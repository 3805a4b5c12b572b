"""Warm-up: what a worker would otherwise load during its first claims.

anyio imports its asyncio backend (and the modules behind `anyio.Event`, task groups
and `to_thread`) on first use, inside a running loop: ~20 ms of CPU that a new worker
would spend between its first claim and its first jobs (a young worker's latency) or
inside a short drain. A Worker loads them when it is made instead.
"""

from __future__ import annotations

import importlib

# What a worker's first run imported lazily (anyio 4.x); a name a future anyio drops
# is skipped: it only costs the first claims some time again.
_LAZY_MODULES = (
    "anyio._backends._asyncio",
    "anyio._core._synchronization",
    "anyio.lowlevel",
    "anyio.to_thread",
    "anyio.streams.memory",
)


def warm_up() -> None:
    """Import the modules a running worker would otherwise import on first use."""
    for name in _LAZY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
