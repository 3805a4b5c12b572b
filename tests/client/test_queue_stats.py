"""Queue.queue_stats: each queue's depth, recent rates and pause state, for live views."""

from __future__ import annotations

import asyncio

import anyio
import asyncpg
import pytest

from aiopgq import Queue, QueueStats, Retry

from ..support.helpers import eventually


async def test_depth_rates_and_pause_state_per_queue(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    release = asyncio.Event()

    @queue.task(name="s.hold", queue="busy")
    async def hold() -> None:
        await release.wait()

    @queue.task(name="s.ok", queue="busy")
    async def ok() -> None:
        pass

    @queue.task(name="s.bad", queue="busy", max_attempts=1, retry=Retry(base=0))
    async def bad() -> None:
        raise ValueError("no")

    for _ in range(3):
        await ok.enqueue()
    await bad.enqueue()
    await hold.enqueue()
    await queue.enqueue("s.later", queue="busy", delay=3600)
    await queue.enqueue_many("s.idle", [{}] * 4, queue="idle")
    await queue.pause("idle")
    await queue.pause("empty")
    await queue.enqueue("s.old", queue="old")
    await queue.cancel((await queue.list_jobs(queue="old"))[0].id)
    # Finished long ago: out of the window, so the queue is not listed.
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '2 hours' "
        "WHERE queue = 'old'"
    )

    worker = queue.worker(queues=["busy"], concurrency=5)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)

        async def settled() -> dict[str, QueueStats]:
            stats = {q.queue: q for q in await queue.queue_stats(window=60)}
            busy = stats.get("busy")
            return stats if busy and busy.running == 1 and busy.done == 3 else {}

        stats = await eventually(settled)
        release.set()
        worker.stop()

    assert sorted(stats) == ["busy", "empty", "idle"]
    busy, idle, empty = stats["busy"], stats["idle"], stats["empty"]
    assert (busy.runnable, busy.scheduled, busy.running) == (0, 1, 1)
    assert (busy.arrived, busy.done, busy.failed, busy.cancelled) == (6, 3, 1, 0)
    assert busy.rate_in == pytest.approx(6 / 60) and busy.rate_out == pytest.approx(4 / 60)
    assert busy.oldest_runnable_age is None and not busy.paused
    assert (idle.runnable, idle.arrived, idle.paused) == (4, 4, True)
    assert idle.oldest_runnable_age is not None and 0 <= idle.oldest_runnable_age < 60
    assert (empty.runnable, empty.arrived, empty.paused, empty.window) == (0, 0, True, 60.0)


async def test_the_window_must_be_positive_seconds(queue: Queue) -> None:
    with pytest.raises(ValueError, match="window must be seconds > 0"):
        await queue.queue_stats(window=0)
    with pytest.raises(TypeError, match="window must be seconds"):
        await queue.queue_stats(window="1m")  # type: ignore[arg-type]


async def test_list_jobs_pages_with_before(queue: Queue) -> None:
    jobs = await queue.enqueue_many("p", [{"i": i} for i in range(5)])
    first = await queue.list_jobs(limit=2)
    assert [j.id for j in first] == [jobs[4].id, jobs[3].id]
    second = await queue.list_jobs(limit=2, before=first[-1].id)
    assert [j.id for j in second] == [jobs[2].id, jobs[1].id]
    with pytest.raises(ValueError, match="before must be a job id"):
        await queue.list_jobs(before="5")  # type: ignore[arg-type]


async def test_latest_failures_newest_first_through_the_finished_index(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="s.fails", max_attempts=1, retry=Retry(base=0))
    async def fails(n: int) -> None:
        raise ValueError(f"bad {n}")

    first, second = await fails.enqueue(1), await fails.enqueue(2)
    await queue.worker().run(burst=True)
    # The first one failed last: newest failure first, whatever the ids.
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() + interval '1 second' "
        "WHERE id = $1",
        first.id,
    )
    latest = await queue.latest_failures(5)
    assert [j.id for j in latest] == [first.id, second.id]
    assert latest[0].last_error is not None and latest[0].last_error.rstrip().endswith("bad 1")
    assert [j.id for j in await queue.latest_failures(1)] == [first.id]
    with pytest.raises(ValueError, match="limit must be an int >= 1"):
        await queue.latest_failures(0)

    # Under many done jobs it reads the index backwards and stops: no scan of the table.
    await conn.execute(
        f'INSERT INTO "{queue.schema}".jobs (task, status, finished_at) '
        "SELECT 't', 'done', now() FROM generate_series(1, 50000)"
    )
    await conn.execute(f'ANALYZE "{queue.schema}".jobs')
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute(f"PREPARE latest(int, int) AS {queue.sql.latest_failures}")
    plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN EXECUTE latest(10, 1024)"))
    assert "Index Scan Backward using jobs_finished_by_status_idx" in plan, plan
    assert "Seq Scan" not in plan, plan
