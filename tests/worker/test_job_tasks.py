"""Each job runs in its own asyncio task. On Python 3.12 and later that task takes its
first step eagerly, inside the fetcher's call (dispatcher.py): a job that never waits
ends there. These hold on every Python the package supports."""

from __future__ import annotations

import asyncio

import anyio

from aiopgq import JobStatus, Queue


async def test_a_stopping_worker_waits_for_the_jobs_of_a_batch_that_still_run(
    queue: Queue,
) -> None:
    """A job that ended at once in its batch must not make the worker look idle while
    the batch's other jobs still run: stopping waits for them (else they are released)."""
    waiting = 0
    all_waiting = asyncio.Event()

    @queue.task(name="tasks.at_once")
    async def at_once() -> None:
        return None

    @queue.task(name="tasks.waits")
    async def waits() -> str:
        nonlocal waiting
        waiting += 1
        if waiting == 5:
            all_waiting.set()
        await asyncio.sleep(0.5)
        return "waited"

    jobs = []
    for _ in range(5):  # one claim, interleaved: at once, waits, at once, ...
        jobs.append(await at_once.enqueue())
        jobs.append(await waits.enqueue())
    async with queue.worker(concurrency=20, grace_period=30, poll_interval=30):
        await asyncio.wait_for(all_waiting.wait(), 10)
    statuses = [(await queue.get_job(job.id)).status for job in jobs]
    assert statuses == [JobStatus.DONE] * 10


async def test_a_handler_runs_in_its_own_task_from_its_first_step(queue: Queue) -> None:
    """Before its first wait the handler is already in its own task: a cancel scope it
    enters there belongs to it (anyio checks the task on exit), and its timeout works."""
    seen: list[str] = []

    @queue.task(name="tasks.scoped")
    async def scoped() -> None:
        task = asyncio.current_task()
        assert task is not None
        seen.append(task.get_name())
        with anyio.move_on_after(0.05) as scope:  # entered before any wait
            await asyncio.sleep(10)
        assert scope.cancelled_caught

    @queue.task(name="tasks.slow", timeout=0.1, max_attempts=1)
    async def slow() -> None:
        await asyncio.sleep(10)

    done, timed_out = await scoped.enqueue(), await slow.enqueue()
    await queue.worker(concurrency=4).run(burst=True)
    assert (await queue.get_job(done.id)).status is JobStatus.DONE
    assert seen == [f"aiopgq job {done.id}"]
    failed = await queue.get_job(timed_out.id)
    assert failed.status is JobStatus.FAILED and "timeout" in (failed.last_error or "")
