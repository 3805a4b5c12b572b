"""Pausing and resuming queues: no claims while paused, across worker processes."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import subprocess
import time
from collections.abc import Iterable

import asyncpg
import pytest

from aiopgq import JobStatus, Queue
from aiopgq._worker.pauses import Pauses

from ..support.cli import cli, run_cli
from ..support.helpers import eventually


async def test_paused_queue_is_left_alone_and_enqueue_still_works(queue: Queue) -> None:
    ran: list[str] = []

    @queue.task(name="p.email", queue="emails")
    async def email() -> None:
        ran.append("emails")

    @queue.task(name="p.report", queue="reports")
    async def report() -> None:
        ran.append("reports")

    await queue.pause("emails")
    await queue.pause("emails")  # twice: still paused, no error
    assert await queue.paused_queues() == ["emails"]
    held = await email.enqueue()  # enqueue into a paused queue works
    await report.enqueue()
    await queue.worker(queues=["emails", "reports"]).run(burst=True)  # several queues
    await queue.worker(queues=["emails"]).run(burst=True)  # one queue, every queue paused
    assert ran == ["reports"]
    assert (await queue.get_job(held.id)).status is JobStatus.PENDING
    status = {row["status"] for row in await queue.status() if row["queue"] == "emails"}
    assert status == {"pending"}

    await queue.resume("emails")
    assert await queue.paused_queues() == []
    await queue.worker(queues=["emails", "reports"]).run(burst=True)
    assert ran == ["reports", "emails"]


async def test_burst_worker_with_every_queue_paused_returns_at_once_and_cleanly(
    dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # It returns before its maintenance has finished connecting: cancelling asyncpg's
    # SSL negotiation half-way left a future whose error asyncio reported at exit.
    await Queue(dsn, schema=schema).migrate()
    for _ in range(3):
        queue = Queue(dsn, schema=schema)
        async with queue:
            await queue.pause("idle")
            started = time.monotonic()
            await queue.worker(queues=["idle"]).run(burst=True)
            assert time.monotonic() - started < 5
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
        await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


async def test_running_worker_hears_pause_at_once_and_resume_wakes_it(queue: Queue) -> None:
    started: list[float] = []

    @queue.task(name="p.mark", queue="marks")
    async def mark() -> None:
        started.append(time.monotonic())

    async with queue.worker(poll_interval=30) as worker:  # no poll, no refresh, in this test
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        await mark.enqueue()
        await eventually(lambda: len(started) == 1, within=10)

        await queue.pause("marks")
        await asyncio.sleep(0.3)  # the NOTIFY's way to the worker
        held = await mark.enqueue()  # its NOTIFY wakes the worker, which leaves it alone
        await asyncio.sleep(1.0)
        assert len(started) == 1
        assert (await queue.get_job(held.id)).status is JobStatus.PENDING

        resumed = time.monotonic()
        await queue.resume("marks")
        await eventually(lambda: len(started) == 2, within=10)
        # The resume's NOTIFY woke the worker: its poll (and refresh) was 15-30 s away.
        assert started[1] - resumed < 5


async def test_running_jobs_of_a_paused_queue_finish(queue: Queue) -> None:
    release = asyncio.Event()
    finished: list[int] = []

    @queue.task(name="p.slow", queue="slow")
    async def slow(n: int) -> None:
        await release.wait()
        finished.append(n)

    async with queue.worker(poll_interval=30) as worker:
        job = await slow.enqueue(1)
        await eventually(lambda: worker.running_jobs == 1, within=10)
        await queue.pause("slow")
        release.set()
        await eventually(lambda: finished == [1], within=10)
    assert (await queue.get_job(job.id)).status is JobStatus.DONE


async def test_worker_without_listen_learns_pause_and_resume_within_a_poll_interval(
    queue: Queue,
) -> None:
    started: list[float] = []

    @queue.task(name="p.polled", queue="polled")
    async def polled() -> None:
        started.append(time.monotonic())

    poll = 0.6
    async with queue.worker(listen=False, poll_interval=poll):
        await polled.enqueue()
        await eventually(lambda: len(started) == 1, within=10)
        await queue.pause("polled")
        await asyncio.sleep(poll)  # the refresh runs every half poll interval
        held = await polled.enqueue()
        await asyncio.sleep(3 * poll)
        assert len(started) == 1
        await queue.resume("polled")
        await eventually(lambda: len(started) == 2, within=10)
    assert (await queue.get_job(held.id)).status is JobStatus.DONE


async def test_pause_and_resume_name_the_problem_with_a_bad_queue_name(queue: Queue) -> None:
    with pytest.raises(ValueError, match="queue name"):
        await queue.pause("")
    with pytest.raises(ValueError, match="queue name"):
        await queue.resume("x" * 201)


async def _start_two_workers(
    dsn: str, queue: Queue, conn: asyncpg.Connection, ledger: str, *options: str
) -> list[subprocess.Popen[str]]:
    """Two CLI worker processes on queue `default`, both seen running jobs."""
    procs = [
        cli(dsn, queue.schema, "worker", "tests.support.app:queue", "--concurrency", "1", *options)
        for _ in range(2)
    ]
    # With one slot each and 0.3 s jobs, four jobs need both workers.
    await queue.enqueue_many("app.sleep", [{"seconds": 0.3}] * 4)
    await eventually(
        lambda: conn.fetchval(f"SELECT count(DISTINCT pid) = 2 FROM {ledger}"), within=60
    )
    return procs


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        finally:
            proc.kill()


async def test_cli_pause_stops_two_worker_processes_and_resume_wakes_them(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    # Poll interval 30 s: the pause reaches the workers by NOTIFY, and only the
    # resume's NOTIFY can start the held jobs within the few seconds allowed below.
    procs = await _start_two_workers(dsn, queue, conn, ledger, "--poll-interval", "30")
    try:
        paused = run_cli(dsn, queue.schema, "--schema", queue.schema, "pause", "default")
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.strip() == "paused queue default"
        await asyncio.sleep(0.5)
        jobs = await queue.enqueue_many("app.noop", [{"n": i} for i in range(20)])
        await asyncio.sleep(2.0)
        assert await conn.fetchval(f"SELECT count(*) FROM {ledger} WHERE task = 'app.noop'") == 0
        status = run_cli(dsn, queue.schema, "--schema", queue.schema, "status")
        assert "paused queues: default" in status.stdout

        resumed = time.monotonic()
        result = run_cli(dsn, queue.schema, "--schema", queue.schema, "resume", "default")
        assert result.returncode == 0, result.stderr

        async def all_done() -> bool:
            states = {(await queue.get_job(job.id)).status for job in jobs}
            return states == {JobStatus.DONE}

        await eventually(all_done, within=20)
        assert time.monotonic() - resumed < 10  # the poll was 30 s away
    finally:
        _stop(procs)


# Two processes through several poll intervals: the slow set; the same fallback in one
# process is test_worker_without_listen_learns_pause_and_resume_within_a_poll_interval.
@pytest.mark.slow
async def test_pause_without_notify_holds_within_one_poll_interval_across_processes(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    """The fallback: a pause written with plain SQL sends no NOTIFY; each worker reads
    the paused queues every half poll interval, so no claim starts more than one poll
    interval after the pause, on either of two busy worker processes."""
    poll = 2.0
    procs = await _start_two_workers(dsn, queue, conn, ledger, "--poll-interval", str(poll))
    table = f'"{queue.schema}".queues'
    try:

        async def produce(seconds: float) -> None:
            # 8 jobs/s of 0.2 s each: more than one worker with one slot can take.
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await queue.enqueue("app.sleep", {"seconds": 0.2})
                await asyncio.sleep(0.125)

        await produce(1.5)
        paused_at = await conn.fetchval(
            f"INSERT INTO {table} (queue, paused) VALUES ('default', true) "
            "ON CONFLICT (queue) DO UPDATE SET paused = true RETURNING clock_timestamp()"
        )
        await produce(3 * poll)
        late = await conn.fetchval(
            f"SELECT max(at) - $1 FROM {ledger} WHERE at > $1 AND task = 'app.sleep'", paused_at
        )
        late_seconds = 0.0 if late is None else late.total_seconds()
        print(f"\nlast job start after the silent pause: {late_seconds:.3f} s (poll {poll} s)")
        assert late_seconds < poll
        jobs = f'"{queue.schema}".jobs'
        after_window = await conn.fetch(
            f"SELECT status::text, count(*) FROM {jobs} "
            "WHERE created_at > $1::timestamptz + make_interval(secs => $2) GROUP BY status",
            paused_at,
            poll,
        )
        counts = {row[0]: row[1] for row in after_window}
        assert set(counts) == {"pending"} and counts["pending"] >= 10, counts  # all held

        await conn.execute(f"UPDATE {table} SET paused = false")  # no NOTIFY either
        await eventually(
            lambda: conn.fetchval(
                f"SELECT count(*) = 0 FROM \"{queue.schema}\".jobs WHERE status <> 'done'"
            ),
            within=30,
        )
    finally:
        _stop(procs)


async def test_a_starting_worker_reads_its_paused_queues_once(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start reads the paused set after the LISTEN connection is up, which serves
    the read every (re)connection asks for: one statement at start, not two. A pause
    sent just before the start is still seen."""
    reads: list[float] = []
    real = Pauses.learned

    def counted(self: Pauses, paused: Iterable[str], limited: Iterable[str]) -> None:
        reads.append(time.monotonic())  # by the start statement or by a refresh
        real(self, paused, limited)

    monkeypatch.setattr(Pauses, "learned", counted)
    started: list[int] = []

    @queue.task(name="p.once", queue="once")
    async def once() -> None:
        started.append(1)

    await queue.pause("once")
    held = await once.enqueue()
    async with queue.worker(poll_interval=30) as worker:  # its refresh is 15 s away
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        await asyncio.sleep(1.0)
        assert len(reads) == 1
        assert started == [] and (await queue.get_job(held.id)).status is JobStatus.PENDING
