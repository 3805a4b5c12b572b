from __future__ import annotations

import asyncio
import time
from collections import Counter

import anyio
import asyncpg

from aiopgq import JobStatus, Queue, Retry

from ..support.helpers import eventually


async def test_four_workers_run_ten_thousand_jobs_exactly_once(dsn: str, queue: Queue) -> None:
    runs: Counter[int] = Counter()

    @queue.task(name="count.it")
    async def count_it(n: int) -> None:
        runs[n] += 1

    total = 10_000
    for start in range(0, total, 2_000):
        await count_it.enqueue_many([{"n": i} for i in range(start, start + 2_000)])

    # Four independent workers, each with its own pool, as four processes would have.
    queues = [Queue(dsn, schema=queue.schema) for _ in range(4)]
    for q in queues:
        q.tasks.update(queue.tasks)
    async with anyio.create_task_group() as group:
        for q in queues:
            group.start_soon(lambda q=q: q.worker(concurrency=50).run(burst=True))

    assert len(runs) == total
    assert set(runs.values()) == {1}
    status = {row["status"]: row["jobs"] for row in await queue.status()}
    assert status == {"done": total}


async def test_failing_job_retries_with_backoff_then_fails(queue: Queue) -> None:
    calls: list[float] = []

    @queue.task(name="always.fails", max_attempts=3, retry=Retry(base=0.2, factor=2, jitter=0))
    async def always_fails() -> None:
        calls.append(time.monotonic())
        raise ValueError("boom")

    job = await always_fails.enqueue()
    async with queue.worker(poll_interval=30):

        async def failed() -> bool:
            return (await queue.get_job(job.id)).status is JobStatus.FAILED

        await eventually(failed)

    final = await queue.get_job(job.id)
    assert final.attempts == 3
    assert final.last_error is not None and "ValueError: boom" in final.last_error
    assert "Traceback" in final.last_error
    assert len(calls) == 3
    # Backoff 0.2 s then 0.4 s; the worker wakes at the retry time, not at the 30 s poll.
    first_gap, second_gap = calls[1] - calls[0], calls[2] - calls[1]
    assert 0.15 <= first_gap < 5
    assert 0.35 <= second_gap < 5
    assert second_gap > first_gap


async def test_retry_backoff_is_capped_and_jittered() -> None:
    retry = Retry(base=10, factor=2, cap=60, jitter=0.1)
    assert 9 <= retry.delay(1) <= 11
    assert 18 <= retry.delay(2) <= 22
    assert 54 <= retry.delay(30) <= 66
    assert 54 <= retry.delay(10_000) <= 66


async def test_idle_worker_is_woken_by_notify_not_by_polling(queue: Queue) -> None:
    started: list[float] = []

    @queue.task(name="wake.me")
    async def wake_me() -> None:
        started.append(time.monotonic())

    worker = queue.worker(poll_interval=30)
    async with worker:
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        await asyncio.sleep(0.2)  # idle: the fetcher is asleep with a 30 s poll interval
        for n in range(1, 4):
            enqueued = time.monotonic()
            await wake_me.enqueue()
            await eventually(lambda n=n: len(started) >= n, within=10, every=0.005)
            assert started[-1] - enqueued < 1.0


async def test_polling_still_runs_jobs_when_listen_is_broken(queue: Queue) -> None:
    done = asyncio.Event()

    @queue.task(name="poll.me")
    async def poll_me() -> None:
        done.set()

    # Point the LISTEN connection (only) at a port where nothing listens: it keeps failing.
    worker = queue.worker(poll_interval=0.3, listen_dsn="postgresql://postgres@127.0.0.1:1/nowhere")
    async with worker:
        await asyncio.sleep(0.5)
        assert worker.listener is not None and not worker.listener.connected.is_set()
        await poll_me.enqueue()
        await asyncio.wait_for(done.wait(), 10)


async def test_listener_reconnects_after_its_backend_is_terminated(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    started = asyncio.Event()

    @queue.task(name="after.kill")
    async def after_kill() -> None:
        started.set()

    worker = queue.worker(poll_interval=30)
    async with worker:
        listener = worker.listener
        assert listener is not None
        await asyncio.wait_for(listener.connected.wait(), 10)
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1",
            worker.listener_name,
        )
        assert killed == 1
        await eventually(lambda: listener.reconnects >= 1, within=10)
        await asyncio.wait_for(listener.connected.wait(), 10)
        t0 = time.monotonic()
        await after_kill.enqueue()
        await asyncio.wait_for(started.wait(), 10)
        assert time.monotonic() - t0 < 1.0  # woken by NOTIFY again, not the 30 s poll


async def test_unknown_task_fails_the_job_and_the_worker_keeps_going(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    ran: list[int] = []

    @queue.task(name="known")
    async def known(n: int) -> None:
        ran.append(n)

    stray = await queue.enqueue("nobody.registered.this", {"x": 1})
    bad_args = await conn.fetchval(
        f"SELECT \"{queue.schema}\".enqueue('known', '{{\"wrong\": 1}}'::jsonb)"
    )
    await known.enqueue(1)
    await queue.worker().run(burst=True)
    assert ran == [1]
    lost = await queue.get_job(stray.id)
    assert lost.status is JobStatus.FAILED
    assert lost.last_error is not None and "nobody.registered.this" in lost.last_error
    assert "register it" in lost.last_error
    mismatch = await queue.get_job(bad_args)
    assert mismatch.status is JobStatus.FAILED
    assert (
        mismatch.last_error is not None
        and "missing a required argument: 'n'" in mismatch.last_error
    )


async def test_graceful_stop_releases_jobs_past_the_grace_period(queue: Queue) -> None:
    started = asyncio.Event()
    finished: list[str] = []

    @queue.task(name="slow")
    async def slow(seconds: float) -> None:
        started.set()
        await asyncio.sleep(seconds)
        finished.append("slow")

    @queue.task(name="quick")
    async def quick() -> None:
        await asyncio.sleep(0.1)
        finished.append("quick")

    long_job = await slow.enqueue(60)
    short_job = await quick.enqueue()
    worker = queue.worker(concurrency=5, grace_period=0.5)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.run)
        await asyncio.wait_for(started.wait(), 10)
        t0 = time.monotonic()
        worker.stop()
    assert time.monotonic() - t0 < 5
    assert finished == ["quick"]
    released = await queue.get_job(long_job.id)
    assert released.status is JobStatus.PENDING
    assert released.attempts == 0  # the stop was not the job's fault
    assert (await queue.get_job(short_job.id)).status is JobStatus.DONE


async def test_heartbeat_keeps_a_long_job_from_being_rescued(queue: Queue) -> None:
    runs: list[int] = []

    @queue.task(name="long")
    async def long() -> None:
        runs.append(1)
        await asyncio.sleep(4.5)

    # The job outlives its visibility timeout twice over; a heartbeat may come late by
    # most of that timeout (a loaded machine) and still keep it.
    job = await long.enqueue()
    await queue.worker(
        heartbeat_interval=0.3, visibility_timeout=2.0, maintenance_interval=0.1
    ).run(burst=True)
    final = await queue.get_job(job.id)
    assert final.status is JobStatus.DONE
    assert runs == [1]
    assert final.attempts == 1


async def test_job_timeout_counts_as_a_failed_attempt(queue: Queue) -> None:
    @queue.task(name="too.slow", timeout=0.2, max_attempts=1)
    async def too_slow() -> None:
        await asyncio.sleep(10)

    job = await too_slow.enqueue()
    await queue.worker().run(burst=True)
    final = await queue.get_job(job.id)
    assert final.status is JobStatus.FAILED
    assert final.last_error is not None and "exceeded its 0.2 s timeout" in final.last_error


async def test_hold_transaction_mode_runs_and_completes(queue: Queue) -> None:
    seen: list[int] = []

    @queue.task(name="held")
    async def held(n: int) -> None:
        seen.append(n)

    @queue.task(name="held.fail", max_attempts=1)
    async def held_fail() -> None:
        raise RuntimeError("nope")

    await held.enqueue_many([{"n": i} for i in range(25)])
    bad = await held_fail.enqueue()
    await queue.worker(concurrency=10, hold_transaction=True).run(burst=True)
    assert sorted(seen) == list(range(25))
    assert (await queue.get_job(bad.id)).status is JobStatus.FAILED
    counts = {r["status"]: r["jobs"] for r in await queue.status()}
    assert counts == {"done": 25, "failed": 1}


async def test_poll_only_queue_sends_no_notify(queue: Queue, conn: asyncpg.Connection) -> None:
    received: list[str] = []
    await conn.add_listener(queue.schema, lambda *args: received.append(args[3]))
    await queue.set_notify("quiet", False)
    await queue.enqueue("x", {}, queue="quiet")
    await queue.enqueue("x", {}, queue="loud")
    await queue.enqueue("x", {}, queue="loud", delay=3600)  # future: no wake-up needed
    await asyncio.sleep(0.3)
    assert received == ["loud"]


async def test_worker_survives_its_connections_being_killed(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    runs: Counter[int] = Counter()

    @queue.task(name="steady")
    async def steady(n: int) -> None:
        await asyncio.sleep(0.01)
        runs[n] += 1

    await steady.enqueue_many([{"n": i} for i in range(2000)])
    # The 60 s lease is longer than the test may take: every job must be recovered
    # without waiting for lease expiry (lost dequeue replies are released at once).
    worker = queue.worker(concurrency=20, poll_interval=0.2, visibility_timeout=60)
    t0 = time.monotonic()
    async with worker:
        await eventually(lambda: len(runs) > 200)
        for _ in range(3):  # kill every backend of this database but ours, repeatedly
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            )
            await asyncio.sleep(0.2)

        async def all_done() -> bool:
            rows = await conn.fetch(
                f'SELECT status::text, count(*) FROM "{queue.schema}".jobs GROUP BY 1'
            )
            return dict(rows) == {"done": 2000}  # type: ignore[comparison-overlap]

        await eventually(all_done, within=60)
    assert time.monotonic() - t0 < 30
    assert set(runs) == set(range(2000))
    assert sum(runs.values()) - 2000 <= 3 * 20  # re-runs only of jobs in flight at a kill


async def test_short_bursts_leave_no_transaction_to_the_pool(queue: Queue) -> None:
    # Maintenance starts with the worker. A burst over an empty queue ended while it
    # was inside a transaction: the cancelled rollback left that transaction open on
    # the pool connection, and asyncpg reported "Resetting connection with an active
    # transaction" through the loop's exception handler (printed on every such exit).
    loop = asyncio.get_running_loop()
    reports: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reports.append(context["message"]))
    try:
        for _ in range(20):
            await queue.worker(queues=["default"]).run(burst=True)
    finally:
        loop.set_exception_handler(previous)
    assert [r for r in reports if "active transaction" in r] == []


async def test_claims_keep_using_indexes_after_the_table_outgrows_its_statistics(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # Statistics taken while the table was empty make the generic plan PostgreSQL
    # builds for a statement (at its sixth execution on a connection, then kept) a set
    # of sequential scans. A worker that polled an empty queue had such plans; with
    # autovacuum off or not yet run, each of its claims then read the whole table.
    table = f'"{queue.schema}".jobs'
    await conn.execute(f"VACUUM ANALYZE {table}")
    done = 0

    @queue.task(name="noop")
    async def noop(n: int) -> None:
        nonlocal done
        done += 1

    worker = queue.worker(concurrency=100, poll_interval=0.01, maintenance_interval=0.05)
    async with worker:
        for n in range(10):  # claims on the empty table, with and without outcomes riding
            await noop.enqueue(n)
            await eventually(lambda ran=n + 1: done == ran, within=10)
            await asyncio.sleep(0.05)
        done = 0
        for start in range(0, 20_000, 5_000):
            await noop.enqueue_many([{"n": n} for n in range(start, start + 5_000)])
        await eventually(lambda: done == 20_000, within=60)
    await queue.close()  # backends report their table statistics as they end
    read = await conn.fetchval(
        "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relid = $1::regclass", table
    )
    print(f"rows read by sequential scans of jobs: {read}")
    # 200 claims of 100: with stale plans ~3 sequential scans each, up to 20,000 rows each
    # (13-14 million rows here); with fresh statistics 16k-101k (scans before an ANALYZE).
    assert read < 1_000_000


def test_a_later_retry_replaces_a_retry_time_already_passed() -> None:
    from datetime import datetime, timedelta, timezone

    from aiopgq._worker.wakeups import Wakeups

    wakeups = Wakeups(["default"])
    now = datetime.now(timezone.utc)
    wakeups.retry_scheduled(now - timedelta(seconds=1))  # due, consumed by a fetch meanwhile
    wakeups.retry_scheduled(now + timedelta(seconds=2))
    assert 0 < wakeups.sleep_timeout(poll_interval=30) <= 2.1  # not the 30 s poll interval


def test_retry_delay_stays_finite_for_huge_factors_and_rejects_infinite_settings() -> None:
    import pytest

    from aiopgq import ConfigurationError

    assert Retry(base=1e300, factor=1e300, cap=5, jitter=0).delay(50) == 5
    with pytest.raises(ConfigurationError, match="finite"):
        Retry(cap=float("inf"))
