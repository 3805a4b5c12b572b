"""The worker's /metrics endpoint: local by default, and a bounded number of series
whatever queue names producers choose."""

from __future__ import annotations

import asyncio
import re
import socket
import urllib.error
import urllib.request

import asyncpg

from aiopgq import Queue
from aiopgq.metrics import MAX_LABELS, OTHER

from ..support.cli import cli
from ..support.helpers import eventually


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return answer.read().decode() if answer.status == 200 else None
    except (OSError, urllib.error.HTTPError):
        return None  # not listening yet


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port` (from /proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.add(address)
    return found


async def test_the_metrics_endpoint_listens_on_loopback_by_default(dsn: str, queue: Queue) -> None:
    port = _free_port()
    proc = cli(dsn, queue.schema, "worker", "tests.support.app:queue", "--metrics-port", str(port))
    try:
        await eventually(lambda: asyncio.to_thread(_scrape, port), within=30)
        # 0100007F is 127.0.0.1; 00000000 would be every interface.
        assert _listening_addresses(port) == {"0100007F"}
    finally:
        proc.terminate()
        proc.wait(20)


async def test_queue_depth_series_are_capped_like_the_counters(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    # A producer chooses 3,000 queue names (through SQL, as a producer role may).
    await conn.execute(
        f"INSERT INTO {queue.schema}.jobs (queue, task, payload) "
        "SELECT 'q' || g, 'app.noop', '{}' FROM generate_series(1, 3000) AS g"
    )
    port = _free_port()
    proc = cli(dsn, queue.schema, "worker", "tests.support.app:queue", "--metrics-port", str(port))
    try:

        async def with_depth() -> str | None:
            text = await asyncio.to_thread(_scrape, port)
            return text if text and "aiopgq_queue_jobs{" in text else None

        text = await eventually(with_depth, within=30)
    finally:
        proc.terminate()
        proc.wait(20)
    series = re.findall(r'^aiopgq_queue_jobs\{queue="([^"]*)",state="(\w+)"\}', text, re.M)
    queues = {name for name, _ in series}
    assert len(queues) == MAX_LABELS + 1 and OTHER in queues
    assert len(series) == 3 * (MAX_LABELS + 1)
    # Nothing is lost: the jobs past the cap add up under "other".
    pending = {
        name: float(value)
        for name, value in re.findall(
            r'^aiopgq_queue_jobs\{queue="([^"]*)",state="pending"\} (\S+)', text, re.M
        )
    }
    assert sum(pending.values()) == 3000 and pending[OTHER] == 3000 - MAX_LABELS
    oldest = re.findall(r"^aiopgq_queue_oldest_runnable_seconds\{", text, re.M)
    assert len(oldest) == MAX_LABELS + 1
