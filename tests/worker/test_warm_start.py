"""A worker loads what it needs when it is made, not during its first claims."""

from __future__ import annotations

import subprocess
import sys


def test_a_new_worker_has_loaded_anyios_asyncio_backend() -> None:
    # A fresh interpreter: this test process has long imported everything.
    code = (
        "import sys\n"
        "from aiopgq import Queue\n"
        "queue = Queue('postgresql://user@localhost/db')\n"
        "@queue.task()\n"
        "async def noop() -> None: ...\n"
        "assert 'anyio._backends._asyncio' not in sys.modules, 'import aiopgq stays light'\n"
        "queue.worker()\n"
        "assert 'anyio._backends._asyncio' in sys.modules, 'the worker did not warm up'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
