"""Prometheus metrics: counters and histograms per queue and task, label caps, and the
worker's /metrics endpoint with queue depth read by one worker at a time."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from aiopgq import Queue, Retry
from aiopgq.metrics import OTHER, Metrics

from ..support.cli import cli
from ..support.helpers import eventually


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


async def test_counters_and_histograms_per_queue_and_task(dsn: str, schema: str) -> None:
    registry = CollectorRegistry()
    queue = Queue(dsn, schema=schema, observers=[Metrics(registry=registry)])
    await queue.migrate()

    @queue.task(name="ok")
    async def ok() -> None:
        await asyncio.sleep(0.02)

    @queue.task(name="flaky", queue="side", max_attempts=2, retry=Retry(base=0, jitter=0))
    async def flaky() -> None:
        raise ValueError("no")

    async with queue:
        await ok.enqueue_many([{}] * 5)
        await flaky.enqueue()
        later = await ok.enqueue(delay=60)
        await queue.cancel(later.id)
        await queue.worker(queues=["default", "side"], concurrency=10).run(burst=True)

    ok_labels = {"queue": "default", "task": "ok"}
    flaky_labels = {"queue": "side", "task": "flaky"}
    assert _value(registry, "aiopgq_jobs_enqueued_total", **ok_labels) == 6
    assert _value(registry, "aiopgq_jobs_cancelled_total", **ok_labels) == 1
    assert _value(registry, "aiopgq_jobs_started_total", **ok_labels) == 5
    assert _value(registry, "aiopgq_jobs_succeeded_total", **ok_labels) == 5
    assert _value(registry, "aiopgq_jobs_started_total", **flaky_labels) == 2
    assert _value(registry, "aiopgq_jobs_retried_total", **flaky_labels) == 1
    assert _value(registry, "aiopgq_jobs_failed_total", **flaky_labels) == 1
    assert _value(registry, "aiopgq_job_run_seconds_count", **ok_labels) == 5
    assert _value(registry, "aiopgq_job_run_seconds_sum", **ok_labels) >= 5 * 0.02  # type: ignore[operator]
    fast = _value(registry, "aiopgq_job_run_seconds_bucket", le="0.01", **ok_labels)
    assert fast == 0  # each slept 20 ms
    assert _value(registry, "aiopgq_job_run_seconds_bucket", le="+Inf", **ok_labels) == 5
    assert _value(registry, "aiopgq_job_start_latency_seconds_count", **flaky_labels) == 2


async def test_task_and_queue_labels_are_capped(dsn: str, schema: str) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry=registry, max_tasks=2, max_queues=1)
    queue = Queue(dsn, schema=schema, observers=[metrics])
    await queue.migrate()
    async with queue:
        for i in range(5):
            await queue.enqueue(f"task.{i}", {}, queue="a" if i < 3 else f"q{i}")
    assert _value(registry, "aiopgq_jobs_enqueued_total", queue="a", task="task.0") == 1
    assert _value(registry, "aiopgq_jobs_enqueued_total", queue="a", task="task.1") == 1
    assert _value(registry, "aiopgq_jobs_enqueued_total", queue="a", task=OTHER) == 1
    assert _value(registry, "aiopgq_jobs_enqueued_total", queue=OTHER, task=OTHER) == 2
    labels = {
        tuple(sorted(sample.labels.items()))
        for family in registry.collect()
        for sample in family.samples
    }
    assert len({dict(pairs).get("task") for pairs in labels}) <= 3  # 2 names + "other"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


async def test_worker_process_serves_metrics_and_queue_depth(
    dsn: str, queue: Queue, ledger: str
) -> None:
    await queue.enqueue_many("app.noop", [{"n": i} for i in range(3)])
    await queue.enqueue("app.noop", {"n": 9}, delay=600)  # scheduled
    await queue.enqueue("app.noop", {"n": 9}, queue="nobody")  # waits: no worker for it
    port = _free_port()
    proc = cli(
        dsn,
        queue.schema,
        "worker",
        "tests.support.app:queue",
        "--metrics-port",
        str(port),
        "--metrics-host",
        "127.0.0.1",
    )
    try:

        async def scraped() -> str | None:
            try:
                status, text = await asyncio.to_thread(_scrape, port)
            except OSError:
                return None  # not listening yet
            done = 'aiopgq_jobs_succeeded_total{queue="default",task="app.noop"} 3.0'
            return text if status == 200 and done in text else None

        text = await eventually(scraped, within=30)
        assert 'aiopgq_queue_jobs{queue="default",state="scheduled"} 1.0' in text
        assert 'aiopgq_queue_jobs{queue="nobody",state="pending"} 1.0' in text
        assert 'aiopgq_queue_oldest_runnable_seconds{queue="nobody"}' in text
        assert "aiopgq_job_run_seconds_bucket" in text
        assert (await asyncio.to_thread(_scrape, port, "/"))[0] == 404
    finally:
        proc.terminate()
        proc.wait(20)


async def test_queue_depth_is_read_by_one_worker_at_a_time(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    from aiopgq._worker.exposition import _depth_key

    registry = CollectorRegistry()
    queue.add_observer(Metrics(registry=registry))
    await queue.enqueue("t", {})
    worker = queue.worker(
        queues=["unserved"], metrics_port=0, metrics_host="127.0.0.1", metrics_registry=registry
    )
    async with worker:
        port = worker.serving_metrics_port
        assert port
        status, text = await asyncio.to_thread(_scrape, port)
        assert status == 200 and 'aiopgq_queue_jobs{queue="default",state="pending"} 1.0' in text
        # Another worker reads the depth right now (it holds the lock): this answer
        # leaves the depth out rather than run the same query at the same time.
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _depth_key(queue.schema))
            status, text = await asyncio.to_thread(_scrape, port)
        assert status == 200
        assert "aiopgq_queue_jobs{" not in text
        assert "aiopgq_jobs_enqueued_total" in text  # the counters are still served


def test_metrics_port_is_checked(queue: Queue) -> None:
    from aiopgq import ConfigurationError

    with pytest.raises(ConfigurationError, match="metrics_port"):
        queue.worker(queues=["a"], metrics_port=70000)


async def test_hold_transaction_workers_are_observed_too(dsn: str, schema: str) -> None:
    registry = CollectorRegistry()
    queue = Queue(dsn, schema=schema, observers=[Metrics(registry=registry)])
    await queue.migrate()

    @queue.task(name="ok")
    async def ok() -> None:
        pass

    async with queue:
        await ok.enqueue_many([{}] * 30)
        await queue.worker(concurrency=8, hold_transaction=True).run(burst=True)
    labels = {"queue": "default", "task": "ok"}
    assert _value(registry, "aiopgq_jobs_started_total", **labels) == 30
    assert _value(registry, "aiopgq_jobs_succeeded_total", **labels) == 30
