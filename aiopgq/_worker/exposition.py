"""Exposition: the worker's /metrics endpoint for Prometheus (`metrics_port`).

Serves a prometheus_client registry (aiopgq.metrics.Metrics counts into the default
one) from a small HTTP server on the worker's event loop, owned by its task group.
At each scrape it also reads the queues' depth from the database, under an advisory
lock: one worker at a time runs that query, and a worker that finds the lock taken
leaves the depth gauges out of this answer instead of waiting or queueing.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Iterator

import anyio
import asyncpg
from anyio.abc import TaskStatus
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .._db.statements import Statements
from .._db.transient import Backoff
from .._errors import ConfigurationError
from .._models import QueueStats
from ..metrics import MAX_LABELS, label

logger = logging.getLogger("aiopgq.metrics")

_READ_TIMEOUT = 5.0  # a scrape's request, and its depth query, get this long
# The queues summary is read over this window; the gauges use its depth, not its rates.
_WINDOW = 60.0


def _depth_key(schema: str) -> int:
    return zlib.crc32(b"aiopgq-queue-depth:" + schema.encode()) & 0x7FFFFFFF


class QueueDepth:
    """A collector of the last depth reading (set just before each scrape's answer).

    Queue names are chosen by producers: like the counters' labels, the first
    `max_queues` names seen keep a label of their own and the rest add up as "other".
    """

    def __init__(self, max_queues: int = MAX_LABELS) -> None:
        self.rows: list[QueueStats] | None = None
        self._max_queues = max_queues
        self._queues: dict[str, str] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows, self.rows = self.rows, None  # one reading, one answer
        if rows is None:
            return
        jobs = GaugeMetricFamily(
            "aiopgq_queue_jobs",
            "Jobs per queue waiting (pending: runnable now; scheduled: run_at in the "
            "future) or running, read from the database at scrape time",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "aiopgq_queue_oldest_runnable_seconds",
            "How long the oldest runnable job of the queue has waited",
            labels=["queue"],
        )
        states = ("pending", "scheduled", "running")
        counts: dict[str, list[float]] = {}  # label -> pending, scheduled, running, oldest
        for q in rows:
            one = counts.setdefault(label(self._queues, q.queue, self._max_queues), [0] * 4)
            for i, count in enumerate((q.runnable, q.scheduled, q.running)):
                one[i] += count
            one[3] = max(one[3], q.oldest_runnable_age or 0.0)
        for name, one in counts.items():
            for i, state in enumerate(states):
                jobs.add_metric([name, state], one[i])
            oldest.add_metric([name], one[3])
        yield jobs
        yield oldest


class MetricsServer:
    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        *,
        host: str,
        port: int,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._pool = pool
        self._sql = sql
        self._host = host
        self._port = port
        self._registry = registry if registry is not None else REGISTRY
        self._depth = QueueDepth()
        self._backoff = Backoff(logger, "reading queue depth for /metrics")

    async def run(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the port it listens on once listening."""
        try:
            server = await asyncio.start_server(self._serve, self._host, self._port)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {self._host}:{self._port} ({exc}): choose "
                "another metrics port, or stop what listens there"
            ) from None
        self._registry.register(self._depth)
        port: int = server.sockets[0].getsockname()[1]
        logger.info("serving metrics at http://%s:%d/metrics", self._host, port)
        try:
            task_status.started(port)
            await anyio.sleep_forever()
        finally:
            self._registry.unregister(self._depth)
            server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with anyio.fail_after(_READ_TIMEOUT):
                request = await reader.readline()
                while (await reader.readline()).strip():  # headers: not needed
                    pass
            parts = request.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            if len(parts) < 2 or parts[0] != "GET":
                await _answer(writer, 405, b"only GET /metrics\n", "text/plain")
            elif path != "/metrics":
                await _answer(writer, 404, b"metrics are at /metrics\n", "text/plain")
            else:
                await self._read_depth()
                body = generate_latest(self._registry)
                await _answer(writer, 200, body, CONTENT_TYPE_LATEST)
        except (OSError, TimeoutError, UnicodeError) as exc:
            logger.debug("metrics request failed: %s", exc)
        finally:
            writer.close()

    async def _read_depth(self) -> None:
        rows: list[QueueStats] | None = None
        try:
            with anyio.fail_after(_READ_TIMEOUT):
                async with self._pool.acquire() as conn, conn.transaction():
                    key = _depth_key(self._sql.schema)
                    if await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", key):
                        found = await conn.fetch(self._sql.queue_stats, _WINDOW)
                        rows = [QueueStats.of(row, _WINDOW) for row in found]
        except Exception as exc:  # the counters are still worth serving
            self._backoff.failed(exc, retry_any=True)
        else:
            self._backoff.succeeded()
        self._depth.rows = rows


async def _answer(writer: asyncio.StreamWriter, status: int, body: bytes, kind: str) -> None:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + body)
    await writer.drain()
