"""Cancelling running jobs: the worker that runs one stops its handler, fleet-wide."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time

import asyncpg
import pytest

from aiopgq import JobNotFound, JobStatus, Queue

from ..support.cli import cli, run_cli
from ..support.helpers import eventually


@pytest.mark.parametrize("timeout", [None, 60.0])  # with a timeout, under a cancel scope
async def test_cancelling_a_running_job_stops_its_handler_and_it_ends_cancelled(
    queue: Queue, timeout: float | None
) -> None:
    events: list[str] = []
    started = asyncio.Event()

    @queue.task(name="c.long", max_attempts=5, timeout=timeout)
    async def long() -> str:
        events.append("started")
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        return "finished"

    async with queue.worker(poll_interval=30) as worker:
        job = await long.enqueue()
        await asyncio.wait_for(started.wait(), 10)
        asked = time.monotonic()
        assert await queue.cancel(job.id)
        await eventually(lambda: events == ["started", "cancelled"], within=10)
        assert time.monotonic() - asked < 1  # by NOTIFY: the heartbeat is 5 s away
        await eventually(lambda: worker.running_jobs == 0, within=5)
        await asyncio.sleep(0.3)  # a retry would start here
    final = await queue.get_job(job.id)
    assert final.status is JobStatus.CANCELLED
    assert final.attempts == 1  # not retried
    assert final.result is None and final.last_error is None
    assert final.locked_by == worker.id  # who ran it
    assert final.finished_at is not None
    assert events == ["started", "cancelled"]


async def test_cancel_reaches_a_worker_without_listen_at_its_next_heartbeat(
    queue: Queue,
) -> None:
    stopped: list[float] = []
    started = asyncio.Event()

    @queue.task(name="c.polled")
    async def polled() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.append(time.monotonic())
            raise

    worker = queue.worker(listen=False, heartbeat_interval=0.3, visibility_timeout=5)
    async with worker:
        job = await polled.enqueue()
        await asyncio.wait_for(started.wait(), 10)
        asked = time.monotonic()
        assert await queue.cancel(job.id)
        await eventually(lambda: stopped, within=10)
        assert stopped[0] - asked < 3  # one heartbeat (0.3 s), with a wide margin
    assert (await queue.get_job(job.id)).status is JobStatus.CANCELLED


async def test_cancelled_thread_handler_keeps_running_but_its_result_is_discarded(
    queue: Queue,
) -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    @queue.task(name="c.sync")
    def blocking() -> str:  # a `def` handler runs in a worker thread
        started.set()
        release.wait(30)
        finished.set()
        return "computed"

    async with queue.worker(poll_interval=30) as worker:
        job = await blocking.enqueue()
        await asyncio.to_thread(started.wait, 10)
        assert await queue.cancel(job.id)
        # The slot is free at once; the thread cannot be interrupted and runs on.
        await eventually(lambda: worker.running_jobs == 0, within=5)
        assert not finished.is_set()
        release.set()
        await asyncio.to_thread(finished.wait, 10)
        await asyncio.sleep(0.3)  # whatever the worker would write, it has written
    final = await queue.get_job(job.id)
    assert final.status is JobStatus.CANCELLED
    assert final.result is None


async def test_handler_that_ignores_cancellation_still_ends_cancelled(queue: Queue) -> None:
    started = asyncio.Event()
    returned: list[str] = []

    @queue.task(name="c.stubborn")
    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass  # swallowed: the handler goes on and returns
        returned.append("returned")
        return "too late"

    async with queue.worker(poll_interval=30):
        job = await stubborn.enqueue()
        await asyncio.wait_for(started.wait(), 10)
        assert await queue.cancel(job.id)
        await eventually(lambda: returned, within=10)
        await asyncio.sleep(0.3)
    final = await queue.get_job(job.id)
    assert (final.status, final.result) == (JobStatus.CANCELLED, None)


async def test_cancelling_a_finished_job_returns_false_and_changes_nothing(
    queue: Queue,
) -> None:
    @queue.task(name="c.ok")
    async def ok() -> int:
        return 7

    @queue.task(name="c.bad", max_attempts=1)
    async def bad() -> None:
        raise ValueError("boom")

    done, failed = await ok.enqueue(), await bad.enqueue()
    await queue.worker().run(burst=True)
    for job in (done, failed):
        before = await queue.get_job(job.id)
        assert not await queue.cancel(job.id)
        assert await queue.get_job(job.id) == before
    pending = await ok.enqueue()
    assert await queue.cancel(pending.id)
    assert not await queue.cancel(pending.id)  # cancelled already
    with pytest.raises(JobNotFound, match="no job with id 987654"):
        await queue.cancel(987654)


async def test_a_job_that_comes_back_to_the_worker_still_running_it_replaces_that_run(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """Cancelled and retried before its worker heard of the cancel (no LISTEN, a slow
    heartbeat), the job is claimed again by the same worker while its first run is
    still going: that run's lease is gone, so it is stopped, and the new run counts."""
    runs: list[str] = []
    first_started = asyncio.Event()

    @queue.task(name="c.again")
    async def again() -> str:
        if not runs:
            runs.append("first")
            first_started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                runs.append("first stopped")
                raise
            runs.append("first finished")
        runs.append("second")
        return "second"

    worker = queue.worker(
        listen=False, poll_interval=0.1, heartbeat_interval=30, visibility_timeout=60
    )
    with caplog.at_level(logging.ERROR):
        async with worker:
            job = await again.enqueue()
            await asyncio.wait_for(first_started.wait(), 10)
            assert await queue.cancel(job.id)
            assert await queue.retry(job.id)

            async def done() -> bool:
                return (await queue.get_job(job.id)).status is JobStatus.DONE

            await eventually(done, within=10)
            await eventually(lambda: worker.running_jobs == 0, within=5)
    assert runs == ["first", "first stopped", "second"]
    final = await queue.get_job(job.id)
    assert (final.attempts, final.result) == (1, "second")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_cancel_p99_under_one_second_over_100_running_jobs_on_3_worker_processes(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    """100 cancels of running jobs spread over 3 worker processes;
    latency = the cancel call's start to the moment the handler saw CancelledError (both
    on this host's clock). The workers poll every 30 s and beat every 5 s: only the
    NOTIFY can be this fast."""
    procs = [
        cli(dsn, queue.schema, "worker", "tests.support.app_cancel:queue", "--concurrency", "34",
            "--poll-interval", "30")
        for _ in range(3)
    ]  # fmt: skip
    try:
        jobs = await queue.enqueue_many("app.block", [{"seconds": 120}] * 100)
        await eventually(
            lambda: conn.fetchval(f"SELECT count(*) = 100 FROM {ledger} WHERE task = 'app.block'"),
            within=60,
        )
        pids = await conn.fetchval(f"SELECT count(DISTINCT pid) FROM {ledger}")
        assert pids == 3  # 34 slots each: every process runs some of the 100

        asked: dict[int, float] = {}
        for job in jobs:
            asked[job.id] = time.time()
            assert await queue.cancel(job.id)
        await eventually(
            lambda: conn.fetchval(
                f"SELECT count(*) = 100 FROM {ledger} WHERE task = 'app.block.cancelled'"
            ),
            within=30,
        )
        rows = await conn.fetch(
            f"SELECT job_id, extract(epoch FROM at)::float8 AS at FROM {ledger} "
            "WHERE task = 'app.block.cancelled'"
        )
        latencies = sorted(row["at"] - asked[row["job_id"]] for row in rows)
        p50, p99 = latencies[49], latencies[98]
        print(
            f"\ncancel -> handler stopped, 100 running jobs on 3 worker processes: "
            f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
        )
        assert p99 < 1.0  # the requirement; measured here: a few ms

        await asyncio.sleep(0.5)  # a retry would have started by now
        states = await conn.fetch(
            f'SELECT status::text, attempts, count(*) FROM "{queue.schema}".jobs GROUP BY 1, 2'
        )
        assert [tuple(row) for row in states] == [("cancelled", 1, 100)]
        starts = await conn.fetchval(f"SELECT count(*) FROM {ledger} WHERE task = 'app.block'")
        assert starts == 100  # none ran again

        cancelled = run_cli(dsn, queue.schema, "--schema", queue.schema, "cancel", str(jobs[0].id))
        assert cancelled.returncode == 0, cancelled.stderr
        assert (
            cancelled.stdout.strip() == f"job {jobs[0].id} is cancelled already: nothing to cancel"
        )
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            finally:
                proc.kill()
