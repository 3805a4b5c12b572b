"""Each job runs in its own asyncio task. On Python 3.11 and later that task takes its
first step eagerly, inside the fetcher's call (_worker/job_tasks.py): a job that never
waits ends there. These hold on every Python the package supports."""

from __future__ import annotations

import asyncio
import contextvars

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


_marker: contextvars.ContextVar[str] = contextvars.ContextVar("test_marker", default="unset")


async def test_a_handler_keeps_its_task_and_its_context_across_its_first_wait(
    queue: Queue,
) -> None:
    """Where the first step runs inside the dispatcher's call (Python 3.11 and later),
    the task it sees is the one that runs the rest (anyio can describe it), and what it
    sets in its context variables is its own: no other job sees it."""
    seen: list[tuple[str, bool, str, str]] = []

    @queue.task(name="tasks.context")
    async def context(n: int) -> None:
        before = asyncio.current_task()
        inherited = _marker.get()
        _marker.set(f"job {n}")
        named = anyio.get_current_task().name  # reads the task's coroutine
        await asyncio.sleep(0.01)
        seen.append((inherited, asyncio.current_task() is before, named, _marker.get()))

    jobs = [await context.enqueue(n) for n in range(5)]
    await queue.worker(concurrency=10).run(burst=True)
    assert sorted(seen) == sorted(
        ("unset", True, f"aiopgq job {job.id}", f"job {n}") for n, job in enumerate(jobs)
    )
    assert _marker.get() == "unset"  # nor does the worker's


async def test_a_deadline_already_passed_in_the_first_step_cancels_its_wait(
    queue: Queue,
) -> None:
    """A cancel scope whose deadline has passed on entry, before the handler's first
    wait: the wait is cancelled and the scope catches it, as in any task."""
    caught: list[bool] = []

    @queue.task(name="tasks.no_time")
    async def no_time() -> None:
        with anyio.move_on_after(0) as scope:
            await asyncio.sleep(10)
        caught.append(scope.cancelled_caught)

    job = await no_time.enqueue()
    await queue.worker().run(burst=True)
    assert caught == [True]
    assert (await queue.get_job(job.id)).status is JobStatus.DONE


async def test_a_handler_that_cancels_its_own_task_before_waiting_is_cancelled(
    queue: Queue,
) -> None:
    """`asyncio.current_task().cancel()` in the first step: the handler's next wait
    raises CancelledError, and the attempt fails as cancelled from inside."""
    reached: list[str] = []

    @queue.task(name="tasks.self_cancel", max_attempts=1)
    async def self_cancel() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            reached.append("cancelled")
            raise

    job = await self_cancel.enqueue()
    await queue.worker().run(burst=True)
    assert reached == ["cancelled"]
    failed = await queue.get_job(job.id)
    assert failed.status is JobStatus.FAILED
    assert "cancelled from inside" in (failed.last_error or "")


async def test_done_callbacks_added_in_the_first_step_run_when_the_task_ends(
    queue: Queue,
) -> None:
    """A handler that adds a done callback to its own task before any wait (anyio does,
    to the task it takes as the root, where it finds no other): the callback runs once
    the task is done, whether the job ended in that step or waited first."""
    ended: list[tuple[str, bool]] = []

    @queue.task(name="tasks.callback")
    async def callback(waits: bool) -> None:
        task = asyncio.current_task()
        assert task is not None and task.get_loop() is asyncio.get_running_loop()
        label = "waits" if waits else "at once"
        task.add_done_callback(lambda t: ended.append((label, t.done())))
        if waits:
            await asyncio.sleep(0.01)

    jobs = [await callback.enqueue(False), await callback.enqueue(True)]
    await queue.worker().run(burst=True)
    assert sorted(ended) == [("at once", True), ("waits", True)]
    assert [(await queue.get_job(job.id)).status for job in jobs] == [JobStatus.DONE] * 2
