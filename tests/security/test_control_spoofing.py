"""Control messages are hints: a role that can only connect sends the NOTIFYs that
Queue.cancel, Queue.pause and Queue.resume send, and the worker changes nothing."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import JobStatus, Queue

from ..support.helpers import eventually


@pytest.fixture
async def outsider(dsn: str, queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[str]:
    """A login role granted nothing (PUBLIC's CONNECT only): it can NOTIFY on any channel."""
    role = f"aiopgq_outsider_{uuid.uuid4().hex[:8]}"
    await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield role
    finally:
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


async def spoof(dsn: str, role: str, channel: str, messages: list[object]) -> None:
    """Send each message from `role`, each in its own transaction (as many senders would)."""
    sender = await asyncpg.connect(dsn, user=role)
    try:
        assert await sender.fetchval("SELECT current_user") == role
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # it really has no rights
            await sender.execute(f'SELECT count(*) FROM "{channel}".jobs')
        for message in messages:
            text = message if isinstance(message, str) else json.dumps(message)
            await sender.execute("SELECT pg_notify($1, $2)", channel, text)
    finally:
        await sender.close()


async def test_spoofed_cancels_do_not_stop_a_running_job(
    dsn: str, queue: Queue, outsider: str
) -> None:
    release = asyncio.Event()
    started: dict[str, asyncio.Event] = {"victim": asyncio.Event(), "sentinel": asyncio.Event()}
    stopped: list[str] = []

    @queue.task(name="spoof.hold", max_attempts=3)
    async def hold(name: str) -> str:
        started[name].set()
        try:
            if name == "victim":
                await release.wait()
            else:
                await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.append(name)
            raise
        return name

    # A short lease: were the victim's handler stopped, its retry would come soon.
    worker = queue.worker(concurrency=2, heartbeat_interval=0.5, visibility_timeout=3)
    async with worker:
        victim = await hold.enqueue(name="victim")
        await asyncio.wait_for(started["victim"].wait(), 10)
        sentinel = await hold.enqueue(name="sentinel")
        await asyncio.wait_for(started["sentinel"].wait(), 10)
        await spoof(dsn, outsider, queue.sql.channel, [{"cancel": victim.id}] * 20)
        # A real cancel, sent after the spoofed ones: once its handler stopped, the
        # worker has heard (and checked) every spoofed message before it.
        assert await queue.cancel(sentinel.id)
        await eventually(lambda: "sentinel" in stopped, within=10)
        assert stopped == ["sentinel"]
        assert (await queue.get_job(victim.id)).status is JobStatus.RUNNING
        release.set()
        await eventually(lambda: _status(queue, victim.id, JobStatus.DONE), within=10, every=0.05)
    final = await queue.get_job(victim.id)
    assert (final.status, final.attempts, final.result) == (JobStatus.DONE, 1, "victim")
    assert stopped == ["sentinel"]
    assert (await queue.get_job(sentinel.id)).status is JobStatus.CANCELLED


async def test_spoofed_pauses_do_not_stop_the_queue(dsn: str, queue: Queue, outsider: str) -> None:
    ran: list[int] = []

    @queue.task(name="spoof.work")
    async def work(n: int) -> None:
        ran.append(n)

    # The paused set is read again every poll_interval / 2 (30 s) without messages: a
    # job that runs within 10 s was not held back by a spoofed pause.
    async with queue.worker(poll_interval=60):
        for n in range(3):
            await spoof(dsn, outsider, queue.sql.channel, [{"pause": "default"}] * 5)
            # The insert's wake-up reaches the worker after the spoofed pauses.
            await work.enqueue(n=n)
            await eventually(lambda n=n: n in ran, within=10)
    assert ran == [0, 1, 2]


async def test_spoofed_resume_does_not_resume_a_paused_queue(
    dsn: str, queue: Queue, outsider: str
) -> None:
    ran: list[str] = []

    @queue.task(name="spoof.paused", queue="held")
    async def paused_work() -> None:
        ran.append("held")

    @queue.task(name="spoof.other", queue="other")
    async def other() -> None:
        ran.append("other")

    await queue.pause("held")
    async with queue.worker(queues=["held", "other"], poll_interval=60):
        job = await paused_work.enqueue()
        await spoof(dsn, outsider, queue.sql.channel, [{"resume": "held"}, "held"] * 3)
        for _ in range(3):  # a few claim rounds after the spoofed messages
            ran_before = ran.count("other")
            await other.enqueue()
            await eventually(lambda n=ran_before: ran.count("other") > n, within=10)
        assert "held" not in ran
        assert (await queue.get_job(job.id)).status is JobStatus.PENDING
        await queue.resume("held")  # the real resume still acts at once
        await eventually(lambda: "held" in ran, within=10)


async def _status(queue: Queue, job_id: int, status: JobStatus) -> bool:
    return (await queue.get_job(job_id)).status is status
