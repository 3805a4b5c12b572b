"""Failed jobs: their error history, listing them, and re-queueing them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from aiopgq import JobNotFound, JobStatus, Queue, QueueNotOpen, Retry

from ..support.helpers import eventually

NOW = Retry(base=0, jitter=0)  # retry at once


async def test_retry_requeues_a_failed_job_with_attempts_reset_and_keeps_its_errors(
    queue: Queue,
) -> None:
    outcomes = ["fail", "fail", "ok"]

    @queue.task(name="r.flaky", max_attempts=2, retry=NOW)
    async def flaky(n: int) -> int:
        if outcomes.pop(0) == "fail":
            raise ValueError(f"boom {n}")
        return n

    job = await flaky.enqueue(3)
    worker = queue.worker()
    await worker.run(burst=True)
    failed = await queue.get_job(job.id)
    assert (failed.status, failed.attempts) == (JobStatus.FAILED, 2)
    assert [e.attempt for e in failed.errors] == [1, 2]
    for error in failed.errors:
        assert "Traceback" in error.error and error.error.rstrip().endswith("ValueError: boom 3")
        assert error.worker == worker.id
    assert failed.errors[0].at <= failed.errors[1].at <= failed.finished_at  # type: ignore[operator]
    assert failed.last_error == failed.errors[-1].error

    assert await queue.retry(job.id)
    requeued = await queue.get_job(job.id)
    assert (requeued.status, requeued.attempts, requeued.max_attempts) == (JobStatus.PENDING, 0, 2)
    assert requeued.finished_at is None and requeued.locked_by is None
    assert requeued.errors == failed.errors  # the history stays
    assert requeued.last_error == failed.last_error

    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert (done.status, done.attempts, done.result) == (JobStatus.DONE, 1, 3)
    assert len(done.errors) == 2


async def test_retry_takes_cancelled_jobs_and_refuses_others(queue: Queue) -> None:
    @queue.task(name="r.ok")
    async def ok() -> None:
        pass

    cancelled, pending, done = await ok.enqueue(), await ok.enqueue(), await ok.enqueue()
    assert await queue.cancel(cancelled.id)
    await queue.worker().run(burst=True)  # runs `pending` and `done`
    pending = await ok.enqueue()
    for job in (pending, done):
        before = await queue.get_job(job.id)
        assert not await queue.retry(job.id)
        assert await queue.get_job(job.id) == before
    assert await queue.retry(cancelled.id)
    assert (await queue.get_job(cancelled.id)).status is JobStatus.PENDING
    with pytest.raises(JobNotFound, match="no job with id 424242"):
        await queue.retry(424242)


async def test_retry_failed_by_queue_and_task_and_all(queue: Queue) -> None:
    @queue.task(name="r.a", max_attempts=1)
    async def a() -> None:
        raise RuntimeError("a")

    @queue.task(name="r.b", max_attempts=1)
    async def b() -> None:
        raise RuntimeError("b")

    for name in ("q1", "q2"):
        await queue.enqueue_many("r.a", [{}] * 2, queue=name)
        await queue.enqueue_many("r.b", [{}] * 3, queue=name)
    cancelled = await a.enqueue()
    assert await queue.cancel(cancelled.id)
    await queue.worker(queues=["q1", "q2"]).run(burst=True)

    assert await queue.retry_failed(queue="q1", task="r.a") == 2
    assert await queue.retry_failed(task="r.b") == 6
    assert await queue.retry_failed(queue="q9") == 0
    assert await queue.retry_failed() == 2  # the rest: r.a of q2; cancelled jobs stay
    counts = {(r["queue"], r["status"]): r["jobs"] for r in await queue.status()}
    assert counts == {("q1", "pending"): 5, ("q2", "pending"): 5, ("default", "cancelled"): 1}
    with pytest.raises(ValueError, match="queue name"):
        await queue.retry_failed(queue="")


async def test_retry_failed_walks_a_backlog_larger_than_one_page(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    await conn.execute(
        f'INSERT INTO "{queue.schema}".jobs (task, status, attempts, last_error, finished_at) '
        "SELECT 'r.old', 'failed', 5, 'old failure ' || g, now() FROM generate_series(1, 2500) g"
    )
    assert await queue.retry_failed() == 2500
    rows = await conn.fetch(
        f'SELECT status::text, attempts, errors FROM "{queue.schema}".jobs LIMIT 3'
    )
    assert {(r["status"], r["attempts"]) for r in rows} == {("pending", 0)}
    # Rows that failed before the history existed: their last_error joins it.
    job = (await queue.list_jobs(task="r.old", limit=1))[0]
    assert [(e.attempt, e.worker) for e in job.errors] == [(5, None)]
    assert job.errors[0].error == job.last_error


async def test_history_keeps_the_last_ten_errors_each_bounded(queue: Queue) -> None:
    @queue.task(name="r.loud", max_attempts=15, retry=NOW)
    async def loud() -> None:
        raise ValueError("x" * 20_000)

    job = await loud.enqueue()
    await queue.worker().run(burst=True)
    final = await queue.get_job(job.id)
    assert final.status is JobStatus.FAILED
    assert [e.attempt for e in final.errors] == list(range(6, 16))
    for error in final.errors:
        assert len(error.error) <= 8000 and "Traceback" in error.error


async def test_retry_wakes_a_sleeping_worker(queue: Queue) -> None:
    calls: list[float] = []

    @queue.task(name="r.once", max_attempts=1)
    async def once() -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise ValueError("first time")

    async with queue.worker(poll_interval=30) as worker:
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        job = await once.enqueue()

        async def failed() -> bool:
            return (await queue.get_job(job.id)).status is JobStatus.FAILED

        await eventually(failed, within=10)
        asked = time.monotonic()
        assert await queue.retry(job.id)
        await eventually(lambda: len(calls) == 2, within=10)
        assert calls[1] - asked < 5  # woken by the retry's NOTIFY: the poll is 30 s away


async def test_idempotency_keys_stay_unique_when_jobs_are_retried(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    table = f'"{queue.schema}".jobs'
    ids = [
        await conn.fetchval(
            f"INSERT INTO {table} (task, status, idempotency_key, finished_at) "
            "VALUES ('r.k', $1, $2, now()) RETURNING id",
            status,
            key,
        )
        for status, key in [("failed", "k1"), ("failed", "k1"), ("failed", "k2")]
    ]
    live = await queue.enqueue("r.k", {}, idempotency_key="k2")
    assert not await queue.retry(ids[2])  # a live job holds k2
    assert await queue.retry_failed() == 1  # of the two k1 jobs, only the newest
    states = dict(await conn.fetch(f"SELECT id, status::text FROM {table}"))
    assert states == {ids[0]: "failed", ids[1]: "pending", ids[2]: "failed", live.id: "pending"}


async def test_list_jobs_filters_newest_first(queue: Queue) -> None:
    @queue.task(name="r.l1", max_attempts=1)
    async def l1() -> None:
        raise KeyError("missing")

    await queue.enqueue_many("r.l1", [{}] * 3)
    await queue.enqueue_many("r.l2", [{}] * 2, queue="other")
    await queue.worker(queues=["default"]).run(burst=True)
    failed = await queue.list_jobs(status="failed")
    assert [j.id for j in failed] == sorted((j.id for j in failed), reverse=True)
    assert len(failed) == 3 and all(j.task == "r.l1" for j in failed)
    assert all(j.last_error and "KeyError: 'missing'" in j.last_error for j in failed)
    assert len(await queue.list_jobs(status=JobStatus.PENDING, queue="other")) == 2
    assert len(await queue.list_jobs(task="r.l1", limit=2)) == 2
    assert len(await queue.list_jobs()) == 5
    with pytest.raises(ValueError, match="status must be one of pending, running"):
        await queue.list_jobs(status="broken")
    with pytest.raises(ValueError, match="limit must be"):
        await queue.list_jobs(limit=0)


async def test_operator_calls_on_a_closed_queue_say_how_to_open_it(dsn: str, schema: str) -> None:
    queue = Queue(dsn, schema=schema)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "pause": lambda: queue.pause("q"),
        "resume": lambda: queue.resume("q"),
        "paused_queues": queue.paused_queues,
        "retry": lambda: queue.retry(1),
        "retry_failed": queue.retry_failed,
        "list_jobs": queue.list_jobs,
    }
    for name, call in calls.items():
        with pytest.raises(QueueNotOpen, match="async with queue:"):
            await call()
            pytest.fail(f"{name} ran on a closed queue")
