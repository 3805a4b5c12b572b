"""The overview lists every known queue, idle ones with zeros, and a job that succeeded
on a retry shows no stale error as its current one (its past errors stay, as history)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import asyncpg
import httpx
from starlette.applications import Starlette

from aiopgq import JobStatus, Queue, Retry
from aiopgq.dashboard import create_app


@asynccontextmanager
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        yield http


def queue_rows(html: str) -> dict[str, str]:
    """The overview's queue table: queue name -> its row's HTML."""
    return dict(re.findall(r'<tr data-queue="([^"]+)">(.*?)</tr>', html, re.S))


async def test_every_known_queue_is_listed_idle_ones_with_zeros(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="o.quiet", queue="quiet")  # registered by the worker, never enqueued
    async def quiet() -> None:
        pass

    await queue.enqueue("o.busy", {}, queue="busy")
    await queue.enqueue("o.old", {}, queue="old")
    await queue.worker(queues=["quiet"]).run(burst=True)
    await queue.pause("resumed")  # a row in the queues table, no job ever
    await queue.resume("resumed")
    await queue.configure("limited", concurrency=3)
    await queue.cancel((await queue.list_jobs(queue="old"))[0].id)
    # Finished long ago, and nothing else knows the queue: listing it would mean reading
    # every finished job at each refresh.
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '2 hours' "
        "WHERE queue = 'old'"
    )

    stats = {q.queue: q for q in await queue.queue_stats(window=60)}
    assert sorted(stats) == ["busy", "limited", "quiet", "resumed"]
    for name in ("limited", "quiet", "resumed"):
        idle = stats[name]
        counts = (idle.runnable, idle.running, idle.arrived, idle.done, idle.paused)
        assert counts == (0, 0, 0, 0, False), name
    assert stats["busy"].runnable == 1

    async with client(create_app(queue, window=60)) as http:
        page = await http.get("/")
    assert page.status_code == 200
    rows = queue_rows(page.text)
    assert sorted(rows) == ["busy", "limited", "quiet", "resumed"]
    assert rows["quiet"].count('<td class="num">0</td>') >= 4 and "active" in rows["quiet"]


async def test_a_job_done_on_a_retry_shows_its_old_error_as_history_only(queue: Queue) -> None:
    tries = 0

    @queue.task(name="o.flaky", retry=Retry(base=0, jitter=0))
    async def flaky() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise RuntimeError("first try breaks")
        return "ok"

    job = await flaky.enqueue()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            worker = queue.worker()
            tg.start_soon(worker.run)
            assert (await job.wait()).status is JobStatus.DONE
            worker.stop()
    done = await queue.get_job(job.id)
    assert done.last_error and "first try breaks" in done.last_error  # kept, as history

    async with client(create_app(queue)) as http:
        listed = (await http.get("/jobs")).text
        shown = (await http.get(f"/jobs/{job.id}")).text
    row = re.search(rf'<tr data-job="{job.id}".*?</tr>', listed, re.S)
    assert row is not None and "first try breaks" not in row.group(0)
    assert "Errors of earlier attempts" in shown and "attempt 2 succeeded" in shown
    assert "first try breaks" in shown  # the history keeps it
    assert '<details id="error-1" open>' not in shown
