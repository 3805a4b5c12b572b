"""Job dependencies (depends_on=, on_parent_failure=, ctx.parent_results()) through the
public API: graphs, failure policies, retries, every enqueue path, and what a job sees of
parents that were archived or pruned."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest

from aiopgq import (
    Abort,
    Job,
    JobCancelled,
    JobContext,
    JobFailed,
    JobNotFound,
    JobStatus,
    Queue,
    SyncQueue,
    Worker,
)

from ..support.cli import run_cli
from ..support.helpers import eventually


@contextlib.asynccontextmanager
async def running(queue: Queue, **options: Any) -> AsyncIterator[Worker]:
    """A worker of the queue, running in this process."""
    worker = queue.worker(
        poll_interval=options.pop("poll_interval", 0.05),
        concurrency=options.pop("concurrency", 10),
        **options,
    )
    async with worker:
        yield worker


async def status_of(queue: Queue, job: Job | int) -> JobStatus:
    return (await queue.get_job(job if isinstance(job, int) else job.id)).status


async def ended(queue: Queue, *jobs: Job, within: float = 30.0) -> list[Job]:
    """The jobs, once each has ended (done, failed or cancelled)."""
    finals = []
    for job in jobs:
        try:
            finals.append(await queue.wait_for_job(job.id, timeout=within))
        except (JobFailed, JobCancelled) as exc:
            finals.append(exc.job)
    return finals


async def test_a_diamond_runs_each_job_once_after_its_parents(queue: Queue) -> None:
    ran: list[str] = []
    seen: dict[int, Any] = {}

    @queue.task(name="step")
    async def step(ctx: JobContext, name: str) -> str:
        ran.append(name)
        seen[ctx.job_id] = await ctx.parent_results()
        return name

    a = await step.enqueue(name="a")
    b = await step.enqueue(name="b", depends_on=a)
    c = await step.enqueue(name="c", depends_on=[a])
    d = await step.enqueue(name="d", depends_on=[b, c.id])
    assert (a.status, b.status, c.status, d.status) == (
        JobStatus.PENDING,
        JobStatus.WAITING,
        JobStatus.WAITING,
        JobStatus.WAITING,
    )
    async with running(queue):
        final = await ended(queue, d)
    assert final[0].status is JobStatus.DONE
    assert sorted(ran) == ["a", "b", "c", "d"] and ran[0] == "a" and ran[-1] == "d"
    assert seen[a.id] == {}
    assert seen[b.id] == {a.id: "a"} and seen[c.id] == {a.id: "a"}
    assert seen[d.id] == {b.id: "b", c.id: "c"}


async def test_a_chain_of_depth_100_runs_in_order(queue: Queue) -> None:
    ran: list[int] = []

    @queue.task(name="link")
    async def link(ctx: JobContext, n: int) -> int:
        parents = await ctx.parent_results()
        assert list(parents.values()) == ([] if n == 0 else [n - 1])
        ran.append(n)
        return n

    jobs = [await link.enqueue(n=0)]
    for n in range(1, 100):
        jobs.append(await link.enqueue(n=n, depends_on=jobs[-1]))
    assert all(job.status is JobStatus.WAITING for job in jobs[1:])
    async with running(queue):
        last = (await ended(queue, jobs[-1], within=60))[0]
    assert last.status is JobStatus.DONE and last.result == 99
    assert ran == list(range(100))


async def test_a_failed_parent_cancels_its_dependents_transitively_naming_it(
    queue: Queue,
) -> None:
    ran: list[str] = []

    @queue.task(name="boom", max_attempts=1)
    async def boom() -> None:
        raise RuntimeError("boom")

    @queue.task(name="step")
    async def step(name: str) -> None:
        ran.append(name)

    parent = await boom.enqueue()
    child = await step.enqueue(name="child", depends_on=parent)
    grandchild = await step.enqueue(name="grandchild", depends_on=child)
    other = await step.enqueue(name="other")
    async with running(queue):
        child_end, grandchild_end, _ = await ended(queue, child, grandchild, other)
    assert ran == ["other"]
    assert child_end.status is JobStatus.CANCELLED
    assert child_end.last_error == f"cancelled: parent job {parent.id} ended failed"
    assert grandchild_end.status is JobStatus.CANCELLED
    assert grandchild_end.last_error == f"cancelled: parent job {child.id} ended cancelled"


async def test_cancelling_a_parent_cancels_its_dependents_and_a_waiting_job_can_be_cancelled(
    queue: Queue,
) -> None:
    @queue.task(name="step")
    async def step() -> None:
        pass

    parent = await step.enqueue()
    child = await step.enqueue(depends_on=parent)
    grandchild = await step.enqueue(depends_on=child)
    assert await queue.cancel(parent.id)
    assert await status_of(queue, child) is JobStatus.CANCELLED
    assert (await queue.get_job(grandchild.id)).last_error == (
        f"cancelled: parent job {child.id} ended cancelled"
    )
    other_parent = await step.enqueue()
    waiting = await step.enqueue(depends_on=other_parent)
    assert await queue.cancel(waiting.id)  # waiting, like pending, is cancellable
    async with running(queue):
        await ended(queue, other_parent)
    assert await status_of(queue, waiting) is JobStatus.CANCELLED


async def test_run_policy_runs_after_every_parent_finished_with_the_results_it_has(
    queue: Queue,
) -> None:
    seen: list[dict[int, Any]] = []

    @queue.task(name="ok")
    async def ok() -> dict[str, int]:
        await asyncio.sleep(0.3)  # finishes after the failure
        return {"rows": 3}

    @queue.task(name="boom", max_attempts=1)
    async def boom() -> None:
        raise RuntimeError("boom")

    @queue.task(name="report")
    async def report(ctx: JobContext) -> None:
        seen.append(await ctx.parent_results())

    good, bad = await ok.enqueue(), await boom.enqueue()
    child = await report.enqueue(depends_on=[good, bad], on_parent_failure="run")
    async with running(queue):
        (final,) = await ended(queue, child)
        assert (await queue.get_job(good.id)).finished_at <= final.finished_at
    assert final.status is JobStatus.DONE
    assert seen == [{good.id: {"rows": 3}}]


async def test_retrying_a_failed_parent_revives_the_dependents_it_cancelled(
    queue: Queue,
) -> None:
    fixed = False
    ran: list[str] = []

    @queue.task(name="flaky", max_attempts=1)
    async def flaky() -> str:
        if not fixed:
            raise RuntimeError("not yet")
        return "fixed"

    @queue.task(name="step")
    async def step(ctx: JobContext, name: str) -> None:
        ran.append(name)

    parent = await flaky.enqueue()
    child = await step.enqueue(name="child", depends_on=parent)
    grandchild = await step.enqueue(name="grandchild", depends_on=child)
    async with running(queue):
        await ended(queue, grandchild)
    assert await status_of(queue, grandchild) is JobStatus.CANCELLED
    fixed = True
    assert await queue.retry(parent.id)
    revived = await queue.get_job(child.id)
    assert revived.status is JobStatus.WAITING and revived.last_error is None
    assert await status_of(queue, grandchild) is JobStatus.WAITING
    async with running(queue):
        child_end, grandchild_end = await ended(queue, child, grandchild)
    assert (child_end.status, grandchild_end.status) == (JobStatus.DONE, JobStatus.DONE)
    assert ran == ["child", "grandchild"]


async def test_an_unknown_parent_is_refused_naming_it_and_nothing_is_enqueued(
    queue: Queue,
) -> None:
    @queue.task(name="step")
    async def step() -> None:
        pass

    parent = await step.enqueue()
    with pytest.raises(JobNotFound, match=r"no job with id 987654321\b"):
        await step.enqueue(depends_on=[parent, 987654321])
    with pytest.raises(JobNotFound, match="987654321"):
        await queue.enqueue_many("step", [{}, {}], depends_on=987654321)
    assert [job.id for job in await queue.list_jobs()] == [parent.id]


async def test_a_parent_done_before_the_enqueue_makes_the_job_pending_at_once(
    queue: Queue,
) -> None:
    seen: list[dict[int, Any]] = []

    @queue.task(name="produce")
    async def produce() -> int:
        return 42

    @queue.task(name="consume")
    async def consume(ctx: JobContext) -> None:
        seen.append(await ctx.parent_results())

    parent = await produce.enqueue()
    async with running(queue):
        await ended(queue, parent)
        child = await consume.enqueue(depends_on=parent)
        assert child.status is JobStatus.PENDING
        await ended(queue, child)
    assert seen == [{parent.id: 42}]


async def test_a_parent_failed_before_the_enqueue_applies_the_policy_at_once(
    queue: Queue,
) -> None:
    @queue.task(name="boom", max_attempts=1)
    async def boom() -> None:
        raise RuntimeError("boom")

    @queue.task(name="step")
    async def step() -> None:
        pass

    parent = await boom.enqueue()
    async with running(queue):
        await ended(queue, parent)
    cancelled = await step.enqueue(depends_on=parent)
    assert cancelled.status is JobStatus.CANCELLED
    assert (await queue.get_job(cancelled.id)).last_error == (
        f"cancelled: parent job {parent.id} ended failed"
    )
    runs = await step.enqueue(depends_on=parent, on_parent_failure="run")
    assert runs.status is JobStatus.PENDING


async def test_enqueue_many_gives_every_job_the_same_parents(queue: Queue) -> None:
    seen: dict[int, dict[int, Any]] = {}

    @queue.task(name="produce")
    async def produce(n: int) -> int:
        return n

    @queue.task(name="consume")
    async def consume(ctx: JobContext, i: int) -> None:
        seen[i] = await ctx.parent_results()

    parents = await queue.enqueue_many("produce", [{"n": 1}, {"n": 2}])
    children = await consume.enqueue_many([{"i": i} for i in range(5)], depends_on=parents)
    assert [child.status for child in children] == [JobStatus.WAITING] * 5
    async with running(queue):
        await ended(queue, *children)
    expected = {parents[0].id: 1, parents[1].id: 2}
    assert seen == {i: expected for i in range(5)}


async def test_sync_queue_enqueues_with_depends_on(dsn: str, queue: Queue) -> None:
    seen: list[dict[int, Any]] = []

    @queue.task(name="produce")
    async def produce() -> str:
        return "made"

    @queue.task(name="consume")
    async def consume(ctx: JobContext) -> None:
        seen.append(await ctx.parent_results())

    parent = await produce.enqueue()

    def enqueue() -> tuple[Job, list[Job]]:
        with SyncQueue(dsn, schema=queue.schema) as producer:
            one = producer.enqueue("consume", depends_on=parent)
            many = producer.enqueue_many("consume", [{}, {}], depends_on=[parent.id])
            with pytest.raises(JobNotFound, match="987654321"):
                producer.enqueue("consume", depends_on=987654321)
            return one, many

    one, many = await anyio.to_thread.run_sync(enqueue)
    assert [job.status for job in (one, *many)] == [JobStatus.WAITING] * 3
    async with running(queue):
        await ended(queue, one, *many)
    assert seen == [{parent.id: "made"}] * 3
    assert len(await queue.list_jobs()) == 4  # the refused one left nothing


async def test_the_sql_function_enqueues_with_depends_on(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    seen: list[dict[int, Any]] = []

    @queue.task(name="produce")
    async def produce() -> int:
        return 7

    @queue.task(name="consume")
    async def consume(ctx: JobContext) -> None:
        seen.append(await ctx.parent_results())

    parent = await produce.enqueue()
    enqueue = f'"{queue.schema}".enqueue'
    child = await conn.fetchval(
        f"SELECT {enqueue}('consume', '{{}}', depends_on => ARRAY[$1]::bigint[])", parent.id
    )
    assert await status_of(queue, child) is JobStatus.WAITING
    with pytest.raises(asyncpg.ForeignKeyViolationError, match="no job with id 987654321"):
        await conn.fetchval(f"SELECT {enqueue}('consume', depends_on => ARRAY[987654321::bigint])")
    with pytest.raises(asyncpg.InvalidParameterValueError, match="on_parent_failure"):
        await conn.fetchval(
            f"SELECT {enqueue}('consume', depends_on => ARRAY[$1]::bigint[], "
            "on_parent_failure => 'skip')",
            parent.id,
        )
    with pytest.raises(asyncpg.InvalidParameterValueError, match="idempotency_key"):
        await conn.fetchval(
            f"SELECT {enqueue}('consume', idempotency_key => 'k', "
            "depends_on => ARRAY[$1]::bigint[])",
            parent.id,
        )
    async with running(queue):
        await ended(queue, await queue.get_job(child))
    assert seen == [{parent.id: 7}]


async def test_bad_options_are_refused_with_what_to_do(queue: Queue) -> None:
    @queue.task(name="step")
    async def step() -> None:
        pass

    parent = await step.enqueue()
    with pytest.raises(ValueError, match="on_parent_failure must be 'cancel' or 'run'"):
        await step.enqueue(depends_on=parent, on_parent_failure="skip")  # type: ignore[typeddict-item]
    with pytest.raises(TypeError, match="depends_on takes jobs"):
        await step.enqueue(depends_on="12")  # type: ignore[typeddict-item]
    with pytest.raises(TypeError, match="depends_on takes jobs"):
        await step.enqueue(depends_on=[parent, 0])
    with pytest.raises(TypeError, match="depends_on takes no idempotency key"):
        await step.enqueue(depends_on=parent, idempotency_key="k")
    with pytest.raises(TypeError, match="use enqueue_many"):
        await queue.copy_many("step", [{}], depends_on=parent)
    assert await step.enqueue(depends_on=[]) is not None  # no parents: a plain job


async def test_waiting_jobs_show_in_the_stats_and_the_lists(queue: Queue) -> None:
    @queue.task(name="step")
    async def step() -> None:
        pass

    parent = await step.enqueue()
    children = await queue.enqueue_many("step", [{}] * 3, depends_on=parent)
    (stats,) = await queue.queue_stats()
    assert (stats.waiting, stats.runnable, stats.arrived) == (3, 1, 4)
    assert {row["status"]: row["jobs"] for row in await queue.status()} == {
        "pending": 1,
        "waiting": 3,
    }
    listed = await queue.list_jobs(status="waiting")
    assert sorted(job.id for job in listed) == sorted(job.id for job in children)
    async with running(queue):
        await ended(queue, *children)
    (stats,) = await queue.queue_stats()
    assert (stats.waiting, stats.done) == (0, 4)


async def test_every_way_a_parent_ends_settles_its_children(queue: Queue) -> None:
    # Outcomes go through different statements: a plain done rides along with a claim
    # or is flushed alone, ctx.transaction() commits it with the handler's rows, progress
    # or an abort go through the special outcomes, and a queue with limits claims (and
    # completes) through claim_limited().
    await queue.configure("limited", concurrency=2)

    @queue.task(name="plain")
    async def plain() -> str:
        return "plain"

    @queue.task(name="in_transaction")
    async def in_transaction(ctx: JobContext) -> None:
        async with ctx.transaction() as conn:
            await conn.execute("SELECT 1")
            ctx.set_result("committed")

    @queue.task(name="progressing")
    async def progressing(ctx: JobContext) -> str:
        await ctx.progress(0.5)
        return "progressed"

    @queue.task(name="aborting")
    async def aborting() -> None:
        raise Abort("no")

    @queue.task(name="limited", queue="limited")
    async def limited() -> str:
        return "limited"

    @queue.task(name="join")
    async def join(ctx: JobContext) -> dict[str, Any]:
        return {str(k): v for k, v in (await ctx.parent_results()).items()}

    parents = [
        await plain.enqueue(),
        await in_transaction.enqueue(),
        await progressing.enqueue(),
        await limited.enqueue(),
    ]
    children = [await join.enqueue(depends_on=parent) for parent in parents]
    aborted = await aborting.enqueue()
    cancelled = await join.enqueue(depends_on=aborted)
    async with running(queue, queues=["default", "limited"]):
        finals = await ended(queue, *children, cancelled)
    results = [final.result for final in finals[:-1]]
    assert results == [
        {str(parents[0].id): "plain"},
        {str(parents[1].id): "committed"},
        {str(parents[2].id): "progressed"},
        {str(parents[3].id): "limited"},
    ]
    assert finals[-1].status is JobStatus.CANCELLED
    assert finals[-1].last_error == f"cancelled: parent job {aborted.id} ended failed"


async def test_a_dependent_still_sees_the_results_of_a_pruned_parent(queue: Queue) -> None:
    # The edge keeps the parent's outcome and result: the child, held back in a paused
    # queue, runs after its parent's row is gone.
    seen: list[dict[int, Any]] = []

    @queue.task(name="produce")
    async def produce() -> str:
        return "kept"

    @queue.task(name="consume", queue="later")
    async def consume(ctx: JobContext) -> None:
        seen.append(await ctx.parent_results())

    await queue.pause("later")
    parent = await produce.enqueue()
    child = await consume.enqueue(depends_on=parent)
    async with running(queue, queues=["default", "later"], retention=0, maintenance_interval=0.1):
        # Pruned means finished (only finished jobs are pruned); waiting for "ended" first
        # lost the race to the pruner now and then (JobNotFound).

        async def pruned() -> bool:
            try:
                await queue.get_job(parent.id)
            except JobNotFound:
                return True
            return False

        await eventually(pruned)
        assert await status_of(queue, child) is JobStatus.PENDING
        await queue.resume("later")
        # Not ended(child): with retention 0 the child too may be pruned before it is read.
        await eventually(lambda: bool(seen))
    assert seen == [{parent.id: "kept"}]


async def test_an_archived_parent_can_still_be_depended_on(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="produce")
    async def produce() -> str:
        return "archived"

    @queue.task(name="consume")
    async def consume(ctx: JobContext) -> dict[str, Any]:
        return {str(k): v for k, v in (await ctx.parent_results()).items()}

    parent = await produce.enqueue()
    async with running(queue):
        await ended(queue, parent)
    await queue.enable_partitioning()
    # Archive it now rather than after archive_after (at least a minute): age the row.
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '1 hour' WHERE id = $1",
        parent.id,
    )
    async with running(queue, maintenance_interval=0.1):

        async def archived() -> bool:
            return bool(
                await conn.fetchval(
                    f'SELECT count(*) FROM "{queue.schema}".jobs_archive WHERE id = $1', parent.id
                )
            )

        await eventually(archived)
        child = await consume.enqueue(depends_on=parent)
        assert child.status is JobStatus.PENDING
        (final,) = await ended(queue, child)
    assert final.result == {str(parent.id): "archived"}


async def test_children_enqueued_while_their_parents_complete_are_all_released(
    queue: Queue,
) -> None:
    # The enqueue and the parent's completion race: each child is enqueued right after
    # its parent, while a busy worker completes parents. None may be left waiting.
    @queue.task(name="quick")
    async def quick(n: int) -> int:
        return n

    children: list[Job] = []
    async with running(queue, concurrency=20, poll_interval=0.01):
        for n in range(200):
            parent = await quick.enqueue(n=n)
            if n % 3 == 0:
                await asyncio.sleep(0.002)  # some parents finish first, some do not
            children.append(await quick.enqueue(n=-n, depends_on=parent))
        finals = await ended(queue, *children, within=60)
    assert all(final.status is JobStatus.DONE for final in finals)


async def test_the_command_line_shows_waiting_jobs(dsn: str, queue: Queue) -> None:
    parent = await queue.enqueue("step", {})
    child = await queue.enqueue("step", {}, depends_on=parent)
    listed = run_cli(dsn, queue.schema, "--schema", queue.schema, "jobs", "--status", "waiting")
    assert listed.returncode == 0, listed.stderr
    assert str(child.id) in listed.stdout and str(parent.id) not in listed.stdout.split()
    shown = run_cli(dsn, queue.schema, "--schema", queue.schema, "job", str(child.id))
    assert shown.returncode == 0 and "waiting" in shown.stdout, shown.stdout
    status = run_cli(dsn, queue.schema, "--schema", queue.schema, "status")
    assert "waiting" in status.stdout, status.stdout
