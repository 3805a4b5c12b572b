"""Results you can await: queue.result(), job.wait(), their one LISTEN connection."""

from __future__ import annotations

import asyncio
import pickle
import time

import asyncpg
import pytest

from aiopgq import (
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobStatus,
    Queue,
    QueueNotOpen,
)

from ..support.helpers import eventually
from ..support.proxy import Proxy


async def test_result_waits_for_the_job_and_returns_its_value(queue: Queue) -> None:
    @queue.task(name="r.add")
    async def add(a: int, b: int) -> int:
        await asyncio.sleep(0.2)
        return a + b

    job = await add.enqueue(1, b=2)
    waiting = asyncio.ensure_future(queue.result(job.id, timeout=30))
    waiting_job = asyncio.ensure_future(job.wait(timeout=30))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    async with queue.worker():
        assert await waiting == 3
        finished = await waiting_job
    assert finished.status is JobStatus.DONE and finished.result == 3 and finished.id == job.id
    # A job that has already ended answers at once, and so does a Job from get_job.
    assert await queue.result(job.id) == 3
    assert (await (await queue.get_job(job.id)).wait()).result == 3


async def test_failed_cancelled_missing_and_timeout(queue: Queue) -> None:
    @queue.task(name="r.boom", max_attempts=1)
    async def boom() -> None:
        raise ValueError("no such customer")

    failing = await boom.enqueue()
    cancelled = await boom.enqueue(delay=3600)
    later = await boom.enqueue(delay=3600)
    waiters = [asyncio.ensure_future(j.wait(timeout=30)) for j in (failing, cancelled)]
    await asyncio.sleep(0.1)
    assert await queue.cancel(cancelled.id)
    await queue.worker().run(burst=True)
    with pytest.raises(JobFailed) as failed:
        await waiters[0]
    assert failed.value.job.id == failing.id and failed.value.job.status is JobStatus.FAILED
    assert failed.value.error == "ValueError: no such customer"
    assert failed.value.traceback is not None
    assert failed.value.traceback.startswith("Traceback") and "in boom" in failed.value.traceback
    assert "no such customer" in str(failed.value)
    with pytest.raises(JobCancelled) as was_cancelled:
        await waiters[1]
    assert was_cancelled.value.job.status is JobStatus.CANCELLED
    with pytest.raises(TimeoutError, match=f"job {later.id} has not ended within 0.3 s"):
        await later.wait(timeout=0.3)
    with pytest.raises(JobNotFound):
        await queue.result(10**12, timeout=10)


async def test_only_awaited_jobs_are_announced(queue: Queue, conn: asyncpg.Connection) -> None:
    @queue.task(name="r.noop")
    async def noop(n: int) -> int:
        return n

    announced: list[str] = []
    await conn.add_listener(queue.sql.done_channel, lambda *args: announced.append(args[3]))
    plain = await noop.enqueue_many([{"n": n} for n in range(50)])
    awaited = await noop.enqueue(99)
    waiting = asyncio.ensure_future(awaited.wait(timeout=30))
    await eventually(lambda: announced == [] and waiting is not None)
    await asyncio.sleep(0.2)  # the waiter marks the job
    await queue.worker().run(burst=True)
    assert (await waiting).result == 99
    await asyncio.sleep(0.2)
    assert announced == [str(awaited.id)]  # none for the 50 jobs nobody awaited
    assert all(j.status is JobStatus.DONE for j in [await queue.get_job(p.id) for p in plain])


async def test_ten_thousand_waiters_share_one_connection(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="r.many")
    async def many(n: int) -> int:
        return n * 2

    jobs = await many.enqueue_many([{"n": n} for n in range(10_000)])
    waiters = [asyncio.ensure_future(job.wait(timeout=120)) for job in jobs]

    async def listening() -> int:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            queue.waiter_name,
        )
        return count

    await eventually(listening)
    assert queue._results.waiters is not None
    await eventually(lambda: not queue._results.waiters._unmarked)  # type: ignore[union-attr]
    assert await listening() == 1
    async with queue.worker(concurrency=100):
        assert await listening() == 1
        results = await asyncio.gather(*waiters)
    assert [job.result for job in results] == [n * 2 for n in range(10_000)]
    assert await listening() == 1
    assert queue._results.waiters.hub is not None and queue._results.waiters.hub.connects == 1


async def test_waiters_resolve_by_polling_while_their_connection_is_down(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="r.slow")
    async def slow() -> str:
        return "late"

    async with Proxy(dsn) as proxy:
        # The pool goes straight to the server; the waiters' LISTEN connection through
        # the proxy, which we cut.
        pool = queue.pool
        watched = Queue(proxy.dsn, pool=pool, schema=queue.schema)
        watched.result_poll_interval = 0.5
        job = await slow.enqueue()
        waiting = asyncio.ensure_future(watched.result(job.id, timeout=60))
        waiters = lambda: watched._results.waiters  # noqa: E731
        await eventually(lambda: waiters() is not None and waiters().listening)  # type: ignore[union-attr]
        proxy.refusing = True
        proxy.cut()  # the connection dies and cannot come back
        await eventually(lambda: not watched._results.waiters.listening)  # type: ignore[union-attr]
        await queue.worker().run(burst=True)
        finished_at = time.monotonic()
        assert await waiting == "late"
        waited = time.monotonic() - finished_at
        assert waited < 0.5 + 1.5, waited  # one poll interval, and slack for a busy machine
        # A silent partition: the ping notices it within a poll interval, then the same.
        proxy.refusing = False
        await eventually(lambda: watched._results.waiters.listening)  # type: ignore[union-attr]
        second = await slow.enqueue()
        waiting = asyncio.ensure_future(watched.result(second.id, timeout=60))
        await asyncio.sleep(0.2)
        proxy.partition()
        await queue.worker().run(burst=True)
        finished_at = time.monotonic()
        assert await waiting == "late"
        assert time.monotonic() - finished_at < 3 * 0.5 + 1.5
        await watched.close()


async def test_closing_the_queue_ends_its_waiters(dsn: str, schema: str) -> None:
    queue = Queue(dsn, schema=schema)
    await queue.migrate()
    async with queue:
        job = await queue.enqueue("r.never", {}, delay=3600)
        waiting = asyncio.ensure_future(job.wait())
        await asyncio.sleep(0.2)
    with pytest.raises(QueueNotOpen):
        await waiting
    with pytest.raises(QueueNotOpen):
        await job.wait()


async def test_a_job_locked_by_a_held_batch_does_not_hold_up_other_waiters(
    queue: Queue,
) -> None:
    started = asyncio.Event()

    @queue.task(name="r.held", queue="held")
    async def held() -> str:
        started.set()
        await asyncio.sleep(1.5)
        return "held"

    @queue.task(name="r.quick", queue="quick")
    async def quick() -> str:
        return "quick"

    queue.result_poll_interval = 0.2
    slow_job = await held.enqueue()
    async with queue.worker(queues=["held"], hold_transaction=True):
        await started.wait()  # its row is locked until the batch commits
        slow = asyncio.ensure_future(slow_job.wait(timeout=30))
        await asyncio.sleep(0.1)
        fast_job = await quick.enqueue()
        begun = time.monotonic()
        async with queue.worker(queues=["quick"]):
            assert (await fast_job.wait(timeout=30)).result == "quick"
        assert time.monotonic() - begun < 1.2  # not behind the locked row
        assert not slow.done()
        assert (await slow).result == "held"


async def test_a_pickled_job_leaves_its_queue_behind(queue: Queue) -> None:
    job = await queue.enqueue("r.pickled", {"n": 1}, delay=3600)
    copied = pickle.loads(pickle.dumps(job))
    assert copied == job
    with pytest.raises(RuntimeError, match=r"use `await queue.result\(\d+\)`"):
        await copied.wait()


async def test_a_batch_mixing_results_and_none_stores_each_jobs_own(queue: Queue) -> None:
    """Done jobs are written a batch at a time, their results as one JSON object by job
    id (aiopgq/_db/arrays.py): each job gets its own value, None stays NULL, and values
    that JSON escapes come back as they were returned."""
    values: list[object] = [
        None,
        'a "quoted" \\ back\\slash',
        {"nested": [1, 2.5, {"deep": None}], "ünïcødé": "✓"},
        0,
        "",
        [None],
        False,
        None,
    ]

    @queue.task(name="r.value")
    async def value(i: int) -> object:
        return values[i % len(values)]

    jobs = [await value.enqueue(i) for i in range(5 * len(values))]
    await queue.worker(concurrency=len(jobs)).run(burst=True)  # one claim, one batch
    for i, job in enumerate(jobs):
        done = await queue.get_job(job.id)
        assert done.status is JobStatus.DONE
        assert done.result == values[i % len(values)], i
