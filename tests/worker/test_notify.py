"""NOTIFY only when needed, and never strand a job whose NOTIFY was skipped."""

from __future__ import annotations

import asyncio
import time

import anyio
import asyncpg
import pytest

from aiopgq import Queue
from aiopgq._worker import awake as awake_role

from ..support.helpers import eventually

# Jobs per enqueue_many in the tests of the skip protocol itself, where any claim that
# finds jobs makes the worker busy (busy_at_any_rate).
BUSY_BATCH = 2


@pytest.fixture
def busy_at_any_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that claims any jobs counts as busy: these tests are about what happens
    while it is awake, not about the rate that makes it so."""
    monkeypatch.setattr(awake_role, "BUSY_RATE", 0.0)


async def listen(conn: asyncpg.Connection, channel: str) -> list[str]:
    received: list[str] = []
    await conn.add_listener(channel, lambda *args: received.append(args[3]))
    return received


async def test_concurrent_producers_skip_notify_while_one_is_in_flight(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    received = await listen(conn, queue.schema)
    first, second = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        async with first.transaction():
            await queue.enqueue("t", {}, connection=first)  # holds the notifier lock
            async with second.transaction():
                await queue.enqueue("t", {}, connection=second)  # skips: registered
        await asyncio.sleep(0.2)
        assert received == ["default"]  # one NOTIFY for two committed jobs
        await queue.enqueue("t", {})  # nobody in flight now: notifies again
        await eventually(lambda: len(received) == 2, within=5)
    finally:
        await first.close()
        await second.close()


async def test_slow_producer_whose_notify_was_skipped_starts_right_after_commit(
    dsn: str, queue: Queue
) -> None:
    started: dict[int, float] = {}

    @queue.task(name="mark")
    async def mark(n: int) -> None:
        started[n] = time.monotonic()

    worker = queue.worker(poll_interval=30, concurrency=20)
    notifier, slow = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        async with worker:
            assert worker.listener is not None
            await asyncio.wait_for(worker.listener.connected.wait(), 10)
            # A notifier is in flight while the slow producer inserts: the slow one skips.
            tx_notifier, tx_slow = notifier.transaction(), slow.transaction()
            await tx_notifier.start()
            await mark.enqueue(0, connection=notifier)
            await tx_slow.start()
            await mark.enqueue(1, connection=slow)

            async def burst() -> None:  # other producers keep committing meanwhile
                for n in range(100, 140):
                    await mark.enqueue(n)
                    await asyncio.sleep(0.02)

            async with anyio.create_task_group() as group:
                group.start_soon(burst)
                await tx_notifier.commit()
                await eventually(lambda: 0 in started, within=5, every=0.005)
                await asyncio.sleep(2.0)  # the slow transaction stays open for 2 s
                assert 1 not in started
                await tx_slow.commit()
                committed = time.monotonic()
                await eventually(lambda: 1 in started, within=10, every=0.002)
            delay = started[1] - committed
            print(f"slow producer's job started {delay * 1000:.1f} ms after its commit")
            assert delay < 0.25  # the poll interval is 30 s: only the skipper drain explains this
            await eventually(lambda: len(started) == 42, within=10)
    finally:
        await notifier.close()
        await slow.close()


async def test_many_concurrent_producers_lose_no_wakeup(dsn: str, queue: Queue) -> None:
    started: set[int] = set()

    @queue.task(name="burst")
    async def burst_job(n: int) -> None:
        started.add(n)

    producers = [Queue(dsn, schema=queue.schema) for _ in range(8)]
    async with queue.worker(poll_interval=30, concurrency=50) as worker:
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)

        async def produce(q: Queue, base: int) -> None:
            async with q:
                for i in range(50):
                    await q.enqueue("burst", {"n": base + i})
                    if i % 10 == 0:
                        await asyncio.sleep(0.01)

        async with anyio.create_task_group() as group:
            for k, q in enumerate(producers):
                group.start_soon(produce, q, k * 1000)
        # All 400 must run long before the 30 s poll could find any of them.
        await eventually(lambda: len(started) == 400, within=10)


async def test_no_notify_while_a_worker_advertises_it_is_awake(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    received = await listen(conn, queue.schema)
    worker_session = await asyncpg.connect(dsn)
    try:
        held = await worker_session.fetchval(queue.sql.hold_awake, queue.schema, ["default"])
        assert held == ["default"]
        await queue.enqueue("t", {})
        await asyncio.sleep(0.2)
        assert received == []  # an awake worker will look again: no NOTIFY needed
        await worker_session.fetchval(queue.sql.release_awake, queue.schema, ["default"])
        await queue.enqueue("t", {})
        await eventually(lambda: received == ["default"], within=5)
    finally:
        await worker_session.close()


async def test_job_skipped_while_worker_awake_starts_when_the_worker_goes_idle(
    dsn: str, queue: Queue, busy_at_any_rate: None
) -> None:
    started: dict[int, float] = {}

    @queue.task(name="awake")
    async def awake(n: int) -> None:
        started[n] = time.monotonic()

    worker = queue.worker(poll_interval=30, recheck_interval=0.2)
    slow = await asyncpg.connect(dsn)
    stream_on = True

    async def stream() -> None:  # busy batches keep the worker awake
        n = 100
        while stream_on:
            await awake.enqueue_many([{"n": n + i} for i in range(BUSY_BATCH)])
            n += BUSY_BATCH
            await asyncio.sleep(0.05)

    try:
        async with worker, anyio.create_task_group() as group:
            assert worker.listener is not None
            group.start_soon(stream)
            await eventually(lambda: worker.listener.awake, within=10, every=0.002)
            async with slow.transaction():
                await awake.enqueue(1, connection=slow)  # the worker is awake: no NOTIFY
                stream_on = False
                await asyncio.sleep(2.0)  # the worker goes idle meanwhile, waiting for us
                assert 1 not in started
                assert not worker.listener.awake
            committed = time.monotonic()
            await eventually(lambda: 1 in started, within=10, every=0.002)
            assert started[1] - committed < 0.25  # poll interval 30 s: the drain did it
    finally:
        await slow.close()


async def test_worker_woken_by_a_poll_still_catches_producers_that_skipped(
    dsn: str, queue: Queue, busy_at_any_rate: None
) -> None:
    """The drain on going idle covers skips even when no NOTIFY ever reached the worker."""
    started: dict[int, float] = {}

    @queue.task(name="polled")
    async def polled(n: int) -> None:
        started[n] = time.monotonic()

    await queue.set_notify("default", False)  # job 0 reaches the worker by polling only
    worker = queue.worker(poll_interval=3, recheck_interval=1.0)
    slow = await asyncpg.connect(dsn)
    try:
        async with worker:
            assert worker.listener is not None
            await asyncio.sleep(0.3)  # the start-up catch-up drain is over
            await polled.enqueue_many([{"n": -i} for i in range(BUSY_BATCH)])  # a busy batch
            await eventually(lambda: 0 in started and worker.listener.awake, within=10)
            await queue.set_notify("default", True)
            async with slow.transaction():
                await polled.enqueue(1, connection=slow)  # worker awake: skips NOTIFY
                assert worker.listener.awake, "machine too slow: the awake window passed"
                await asyncio.sleep(2.0)
                assert not worker.listener.awake
            committed = time.monotonic()
            await eventually(lambda: 1 in started, within=10, every=0.002)
            assert started[1] - committed < 0.25  # not the next 3 s poll
    finally:
        await slow.close()


async def test_a_worker_finding_one_job_at_a_time_leaves_producers_notifying(
    queue: Queue,
) -> None:
    """At a modest rate a NOTIFY wakes the worker at once, where being awake would mean
    looking again every recheck interval: only jobs coming faster than BUSY_RATE make it
    advertise, even when they come in twos."""
    started: list[float] = []

    @queue.task(name="trickle")
    async def trickle(n: int) -> None:
        started.append(time.monotonic())

    # Rechecks 30 s apart: a job that skipped its NOTIFY would wait for one.
    worker = queue.worker(poll_interval=30, recheck_interval=30)
    async with worker:
        assert worker.listener is not None
        for n in range(10):
            expected = len(started) + (1 if n % 2 else 2)  # before: they may start at once
            enqueued = time.monotonic()
            if n % 2:
                await trickle.enqueue(n)
            else:
                await trickle.enqueue_many([{"n": n}, {"n": n + 100}])
            await eventually(lambda e=expected: len(started) == e, within=10, every=0.002)
            assert started[-1] - enqueued < 5  # woken by its NOTIFY, not a recheck
            assert not worker.listener.awake


async def test_a_worker_claiming_faster_than_the_busy_rate_lets_producers_skip_notify(
    queue: Queue,
) -> None:
    """Jobs coming far faster than BUSY_RATE (a producer looping over enqueue_many):
    the worker advertises that it is awake, and goes idle again once they stop."""
    done: list[int] = []

    @queue.task(name="stream")
    async def stream(n: int) -> None:
        done.append(n)

    worker = queue.worker(poll_interval=30, concurrency=100)
    seen_awake = False
    async with worker:
        assert worker.listener is not None
        n = 0
        deadline = time.monotonic() + 20
        while not seen_awake and time.monotonic() < deadline:
            await stream.enqueue_many([{"n": n + i} for i in range(50)])
            n += 50
            seen_awake = worker.listener.awake
        assert seen_awake, f"{n} jobs enqueued in a loop never made the worker busy"
        await eventually(lambda: len(done) == n, within=20)
        await eventually(lambda: not worker.listener.awake, within=10)


async def test_bulk_enqueues_notify_once_per_batch_and_not_while_a_worker_is_awake(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    received = await listen(conn, queue.schema)
    await queue.enqueue_many("t", [{"n": n} for n in range(500)])
    assert await queue.copy_many("t", [{"n": n} for n in range(500)], queue="other") == 500
    await eventually(lambda: sorted(received) == ["default", "other"], within=5)
    await queue.enqueue_many("t", [{}] * 10, delay=3600)  # not runnable yet: no wake-up
    worker_session = await asyncpg.connect(dsn)
    try:
        await worker_session.fetchval(queue.sql.hold_awake, queue.schema, ["default", "other"])
        await queue.enqueue_many("t", [{}] * 10)
        await queue.copy_many("t", [{}] * 10, queue="other")
        await asyncio.sleep(0.2)
        assert sorted(received) == ["default", "other"]  # the awake worker covers both
    finally:
        await worker_session.close()
    counts = await conn.fetch(f'SELECT queue, count(*) FROM "{queue.schema}".jobs GROUP BY 1')
    assert {row["queue"]: row["count"] for row in counts} == {"default": 520, "other": 510}


async def test_one_transaction_notifies_every_queue_it_fills(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    """The decision is remembered per transaction for one queue at a time: a second
    queue (and a switch back) still gets its own NOTIFY; raw SQL does too."""
    received = await listen(conn, queue.schema)
    producer = await asyncpg.connect(dsn)
    try:
        async with producer.transaction():
            await queue.enqueue("t", {}, queue="a", connection=producer)
            await queue.enqueue_many("t", [{}] * 3, queue="b", connection=producer)
            await queue.enqueue("t", {}, queue="a", connection=producer)
            await queue.copy_many("t", [{}] * 3, queue="c", connection=producer)
        await eventually(lambda: sorted(received) == ["a", "b", "c"], within=5)
        received.clear()
        await producer.execute(
            f'INSERT INTO "{queue.schema}".jobs (task, queue) '
            "SELECT 't', q FROM unnest(array['x', 'y', 'x', 'z']) AS q"
        )
        await eventually(lambda: sorted(received) == ["x", "y", "z"], within=5)
    finally:
        await producer.close()


async def test_a_rolled_back_decision_does_not_silence_the_rest_of_the_transaction(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    received = await listen(conn, queue.schema)
    producer = await asyncpg.connect(dsn)
    try:
        async with producer.transaction():
            savepoint = producer.transaction()
            await savepoint.start()
            await queue.enqueue("t", {}, connection=producer)  # decides, then undone
            await savepoint.rollback()
            await queue.enqueue("t", {}, connection=producer)  # must decide again
        await eventually(lambda: received == ["default"], within=5)
    finally:
        await producer.close()
