"""The workflow builder (queue.workflow), groups and the workflow reads, through the public
API: diamonds, a deep chain, cycles and foreign nodes refused, a group's fan-in with its
callback, failure through a group (both policies), retry reviving, cancel_workflow, and
get/wait/list."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from aiopgq import JobContext, JobStatus, Queue, Worker, WorkflowNotFound


@contextlib.asynccontextmanager
async def running(queue: Queue, **options: Any) -> AsyncIterator[Worker]:
    worker = queue.worker(
        poll_interval=options.pop("poll_interval", 0.05),
        concurrency=options.pop("concurrency", 10),
        **options,
    )
    async with worker:
        yield worker


def jobs_of(workflow: Any, task: str) -> list[Any]:
    return [job for job in workflow.jobs if job.task == task]


async def test_a_diamond_runs_each_job_once_after_its_parents(queue: Queue) -> None:
    ran: list[str] = []
    seen: dict[str, dict[int, Any]] = {}

    @queue.task(name="wf.step")
    async def step(ctx: JobContext, name: str) -> str:
        seen[name] = await ctx.parent_results()
        ran.append(name)
        return name

    wf = queue.workflow("diamond")
    a = wf.add(step, "a")
    b = wf.add(step, "b", depends_on=[a])
    c = wf.add(step, name="c", depends_on=a)
    wf.add(step, "d", depends_on=[b, c])
    wid = await wf.enqueue()
    before = await queue.get_workflow(wid)
    assert before.status == "running"
    assert before.counts == {"pending": 1, "waiting": 3}
    async with running(queue):
        done = await queue.wait_for_workflow(wid, timeout=30)
    assert done.status == "done" and done.counts == {"done": 4}
    assert ran[0] == "a" and ran[-1] == "d" and sorted(ran[1:3]) == ["b", "c"]
    ids = {job.id: job for job in done.jobs}
    d = next(job for job in done.jobs if job.parents and len(job.parents) == 2)
    assert sorted(seen["d"].values()) == ["b", "c"]
    assert set(seen["d"]) == set(d.parents)
    assert all(ids[p].status is JobStatus.DONE for p in d.parents)
    assert all(job.finished_at is not None for job in done.jobs)


async def test_a_chain_of_depth_100_runs_in_order(queue: Queue) -> None:
    order: list[int] = []

    @queue.task(name="wf.link")
    async def link(ctx: JobContext, n: int) -> int:
        parents = await ctx.parent_results()
        assert list(parents.values()) == ([] if n == 0 else [n - 1])
        order.append(n)
        return n

    wf = queue.workflow("chain")
    node = wf.add(link, 0)
    for n in range(1, 100):
        node = wf.add(link, n, depends_on=[node])
    wid = await wf.enqueue()
    async with running(queue, concurrency=4):
        done = await queue.wait_for_workflow(wid, timeout=120)
    assert done.status == "done"
    assert order == list(range(100))


async def test_cycles_are_refused_naming_their_nodes(queue: Queue) -> None:
    wf = queue.workflow("loop")
    a = wf.add("wf.x", n=1)
    b = wf.add("wf.x", n=2, depends_on=[a])
    c = wf.add("wf.x", n=3, depends_on=[b])
    a.after(c)
    with pytest.raises(ValueError, match=r"cycle: wf\.x#0 -> wf\.x#1 -> wf\.x#2 -> wf\.x#0"):
        await wf.enqueue()
    assert await queue.list_workflows() == []  # nothing was written
    selfish = queue.workflow("self")
    s = selfish.add("wf.x")
    s.after(s)
    with pytest.raises(ValueError, match=r"cycle: wf\.x#0 -> wf\.x#0"):
        await selfish.enqueue()


async def test_unknown_and_foreign_parents_are_refused(queue: Queue) -> None:
    one = queue.workflow("one")
    other = queue.workflow("other")
    theirs = other.add("wf.x")
    with pytest.raises(TypeError, match="belongs to another workflow builder"):
        one.add("wf.x", depends_on=[theirs])
    with pytest.raises(TypeError, match="depends_on takes nodes of this workflow"):
        one.add("wf.x", depends_on=[42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="belongs to another workflow builder"):
        one.add("wf.x").after(theirs)
    with pytest.raises(ValueError, match="at least one member"):
        one.add_many("wf.x", [])
    with pytest.raises(TypeError, match="do not take"):
        one.add_many("wf.x", [{}], idempotency_key="k")
    with pytest.raises(WorkflowNotFound):
        await queue.get_workflow(999_999)


async def test_a_group_fans_in_to_its_callback_with_every_members_result(queue: Queue) -> None:
    calls: list[dict[int, Any]] = []

    @queue.task(name="wf.square")
    async def square(n: int) -> int:
        return n * n

    @queue.task(name="wf.total")
    async def total(ctx: JobContext) -> int:
        results = await ctx.parent_results()
        calls.append(results)
        return sum(results.values())

    wf = queue.workflow("fan-in")
    group = wf.add_many(square, [{"n": n} for n in range(50)], name="squares")
    wf.add(total, depends_on=[group])
    wid = await wf.enqueue()
    async with running(queue, concurrency=20):
        done = await queue.wait_for_workflow(wid, timeout=60)
    assert done.status == "done"
    assert len(calls) == 1
    members = [job for job in done.jobs if job.group_name == "squares"]
    assert len(members) == 50
    assert set(calls[0]) == {job.id for job in members}
    assert sorted(calls[0].values()) == sorted(n * n for n in range(50))
    (callback,) = jobs_of(done, "wf.total")
    assert callback.parent_group_names == ("squares",) and callback.parents == ()
    assert (await queue.get_job(callback.id)).result == sum(n * n for n in range(50))
    (squares,) = done.groups
    assert (squares.size, squares.remaining, squares.failed, squares.status) == (50, 0, 0, "done")


async def test_a_workflow_writes_each_job_once(queue: Queue, conn: asyncpg.Connection) -> None:
    """Its jobs are inserted with their graph's status and metadata: no second version of
    each row (a group of 10,000 would leave 10,000 dead tuples for its claims to skip)."""

    @queue.task(name="wf.once")
    async def once(n: int) -> int:
        return n

    wf = queue.workflow("written once")
    first = wf.add(once, n=0)
    group = wf.add_many(once, [{"n": n} for n in range(100)], depends_on=[first])
    wf.add(once, n=-1, depends_on=[group, first], max_attempts=2, priority=3)
    async with conn.transaction():
        wid = await wf.enqueue(connection=conn)
        counts = await conn.fetchrow(
            "SELECT pg_stat_get_xact_tuples_inserted(c.oid) AS inserted, "
            "pg_stat_get_xact_tuples_updated(c.oid) AS updated FROM pg_class c "
            "WHERE c.oid = $1::regclass",
            f'"{queue.schema}".jobs',
        )
    assert (counts["inserted"], counts["updated"]) == (102, 0)
    made = await queue.get_workflow(wid)
    assert made.counts == {"pending": 1, "waiting": 101}
    by_node = {job.node: job for job in made.jobs}
    (members,) = made.groups
    assert [j.node for j in made.jobs] == [0] + [1] * 100 + [2]
    assert by_node[2].parents == (by_node[0].id,) and by_node[2].parent_groups == (members.id,)
    callback = await queue.get_job(by_node[2].id)
    assert (callback.max_attempts, callback.priority, callback.payload) == (2, 3, {"n": -1})
    async with running(queue, concurrency=20):
        done = await queue.wait_for_workflow(wid, timeout=60)
    assert done.counts == {"done": 102}


async def test_a_failed_member_cancels_the_group_dependents_or_runs_them(queue: Queue) -> None:
    @queue.task(name="wf.maybe", max_attempts=1)
    async def maybe(n: int) -> int:
        if n == 3:
            raise RuntimeError("member 3 fails")
        return n

    @queue.task(name="wf.after")
    async def after(ctx: JobContext) -> int:
        return len(await ctx.parent_results())

    wf = queue.workflow("failing")
    group = wf.add_many(maybe, [{"n": n} for n in range(5)], name="five")
    cancelled = wf.add(after, depends_on=[group])
    wf.add(after, depends_on=[cancelled])  # transitively
    wf.add(after, depends_on=[group], on_parent_failure="run")
    wid = await wf.enqueue()
    async with running(queue):
        done = await queue.wait_for_workflow(wid, timeout=30)
    assert done.status == "failed"
    assert done.counts == {"done": 5, "failed": 1, "cancelled": 2}
    afters = jobs_of(done, "wf.after")
    first, second, ran = afters
    assert (first.status, second.status, ran.status) == (
        JobStatus.CANCELLED,
        JobStatus.CANCELLED,
        JobStatus.DONE,
    )
    assert "a member of group" in (first.last_error or "")
    assert (await queue.get_job(ran.id)).result == 4  # the four members that were done
    assert done.groups[0].status == "failed"


async def test_retrying_the_failed_member_revives_the_group_dependents(queue: Queue) -> None:
    fail = {"on": True}

    @queue.task(name="wf.flaky", max_attempts=1)
    async def flaky(n: int) -> int:
        if n == 1 and fail["on"]:
            raise RuntimeError("not yet")
        return n

    @queue.task(name="wf.sum")
    async def total(ctx: JobContext) -> int:
        return sum((await ctx.parent_results()).values())

    wf = queue.workflow("revive")
    group = wf.add_many(flaky, [{"n": n} for n in range(3)])
    callback = wf.add(total, depends_on=[group])
    wf.add(total, depends_on=[callback])
    wid = await wf.enqueue()
    async with running(queue):
        failed = await queue.wait_for_workflow(wid, timeout=30)
        assert failed.status == "failed"
        (bad,) = [job for job in failed.jobs if job.status is JobStatus.FAILED]
        fail["on"] = False
        assert await queue.retry(bad.id)
        revived = await queue.get_workflow(wid)
        assert revived.status == "running"
        assert [job.status for job in jobs_of(revived, "wf.sum")] == [JobStatus.WAITING] * 2
        done = await queue.wait_for_workflow(wid, timeout=30)
    assert done.status == "done"
    first, second = jobs_of(done, "wf.sum")
    assert (await queue.get_job(first.id)).result == 3
    assert (await queue.get_job(second.id)).result == 3


async def test_a_repeated_end_of_a_member_is_not_counted_twice(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    wf = queue.workflow("twice")
    group = wf.add_many("wf.none", [{}, {}])
    wf.add("wf.none", depends_on=[group])
    wid = await wf.enqueue()
    members = [job.id for job in (await queue.get_workflow(wid)).jobs if job.group is not None]
    schema = queue.schema
    # A member cancelled, cancelled again (nothing), retried and cancelled again: the
    # group's failed count follows, once per change.
    assert await queue.cancel(members[0])
    assert not await queue.cancel(members[0])
    assert (await queue.get_workflow(wid)).groups[0].failed == 1
    assert await queue.retry(members[0])
    assert (await queue.get_workflow(wid)).groups[0].failed == 0
    # settle_dependents called twice for one outcome: the second changes nothing.
    for _ in range(2):
        await conn.execute(
            f'SELECT "{schema}".settle_dependents($1::bigint[], $2::text[], NULL)',
            [members[1]],
            ["done"],
        )
    (group_row,) = (await queue.get_workflow(wid)).groups
    assert (group_row.remaining, group_row.failed) == (1, 0)


async def test_cancel_workflow_cancels_its_unfinished_jobs(queue: Queue) -> None:
    @queue.task(name="wf.quick")
    async def quick() -> None:
        return None

    wf = queue.workflow("stop")
    first = wf.add(quick)
    group = wf.add_many(quick, [{} for _ in range(10)], depends_on=[first])
    wf.add(quick, depends_on=[group])
    wid = await wf.enqueue()
    other = queue.workflow("keep")
    other.add(quick)
    kept = await other.enqueue()
    assert await queue.cancel_workflow(wid) == 12
    assert await queue.cancel_workflow(wid) == 0
    stopped = await queue.get_workflow(wid)
    assert stopped.status == "cancelled" and stopped.counts == {"cancelled": 12}
    assert stopped.cancelled_at is not None
    assert (await queue.get_workflow(kept)).counts == {"pending": 1}
    with pytest.raises(WorkflowNotFound):
        await queue.cancel_workflow(123_456)


async def test_get_wait_and_list_workflows(queue: Queue, conn: asyncpg.Connection) -> None:
    @queue.task(name="wf.noop")
    async def noop() -> None:
        return None

    ids = []
    for n in range(3):
        wf = queue.workflow(f"w{n}")
        wf.add(noop)
        ids.append(await wf.enqueue())
    listed = await queue.list_workflows(limit=2)
    assert [w.id for w in listed] == [ids[2], ids[1]]
    assert all(w.status == "running" and w.jobs == () for w in listed)
    with pytest.raises(TimeoutError):
        await queue.wait_for_workflow(ids[0], timeout=0.2)
    with pytest.raises(ValueError):
        await queue.list_workflows(limit=0)
    # In the caller's transaction: nothing is there after its rollback.
    with contextlib.suppress(RuntimeError):
        async with conn.transaction():
            wf = queue.workflow("rolled back")
            wf.add(noop)
            await wf.enqueue(connection=conn)
            raise RuntimeError("roll back")
    assert len(await queue.list_workflows(limit=10)) == 3
    async with running(queue):
        for wid in ids:
            assert (await queue.wait_for_workflow(wid, timeout=30)).status == "done"
