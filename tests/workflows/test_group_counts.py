"""How a group counts the members its done paths name (count_member(), counted at commit by
sql/functions/workflows.sql): what one transaction does to a member before its commit, a
member that a later job depends on, and a rolled back savepoint."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from aiopgq import JobContext, JobStatus, Queue, Worker

from ..support.helpers import eventually


@contextlib.asynccontextmanager
async def running(queue: Queue, **options: Any) -> AsyncIterator[Worker]:
    async with queue.worker(poll_interval=0.05, concurrency=10, **options) as worker:
        yield worker


async def group_of_three(queue: Queue) -> tuple[int, list[int], int]:
    """A workflow of three members and a callback, none run: (workflow, members, callback)."""
    wf = queue.workflow("counts")
    group = wf.add_many("wf.member", [{}, {}, {}], name="three")
    wf.add("wf.callback", depends_on=[group])
    wid = await wf.enqueue()
    jobs = (await queue.get_workflow(wid)).jobs
    members = sorted(job.id for job in jobs if job.group is not None)
    (callback,) = [job.id for job in jobs if job.group is None]
    return wid, members, callback


async def status_of(conn: asyncpg.Connection, schema: str, job: int) -> str:
    return str(await conn.fetchval(f'SELECT status::text FROM "{schema}".jobs WHERE id = $1', job))


async def end_as_done(conn: asyncpg.Connection, schema: str, member: int) -> None:
    """What a done path does to a member: its row done, then count_member() for it."""
    await conn.execute(
        f'UPDATE "{schema}".jobs SET status = $2, finished_at = now(), result = $3::jsonb '
        "WHERE id = $1",
        member,
        "done",
        '"ok"',
    )
    assert await conn.fetchval(f'SELECT "{schema}".count_member($1)', member) == 1


async def test_members_are_counted_from_what_their_transaction_leaves(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    schema = queue.schema
    wid, members, callback = await group_of_three(queue)
    first, second, third = members
    # Named twice in one transaction: counted once, with its result.
    async with conn.transaction():
        await end_as_done(conn, schema, first)
        assert await conn.fetchval(f'SELECT "{schema}".count_member($1)', first) == 1
    group = (await queue.get_workflow(wid)).groups[0]
    assert (group.remaining, group.failed) == (2, 0)
    # Done, then retried in the same transaction: not done at its commit, not counted.
    async with conn.transaction():
        await end_as_done(conn, schema, second)
        await conn.execute(
            f'UPDATE "{schema}".jobs SET status = $2, result = NULL WHERE id = $1',
            second,
            "pending",
        )
        await conn.execute(f'SELECT "{schema}".revive_dependents($1::bigint[])', [second])
    group = (await queue.get_workflow(wid)).groups[0]
    assert (group.remaining, group.failed) == (2, 0)
    # Named in a savepoint that rolls back: nothing counted.
    async with conn.transaction():
        await end_as_done(conn, schema, third)
        with contextlib.suppress(RuntimeError):
            async with conn.transaction():
                await conn.fetchval(f'SELECT "{schema}".count_member($1)', second)
                raise RuntimeError("roll the savepoint back")
        await conn.execute(
            f'UPDATE "{schema}".jobs SET status = $2, finished_at = NULL, result = NULL '
            "WHERE id = $1",
            third,
            "pending",
        )
    # (third: its count_member() came before the savepoint, and its row ended pending.)
    group = (await queue.get_workflow(wid)).groups[0]
    assert (group.remaining, group.failed) == (2, 0)
    assert await status_of(conn, schema, callback) == "waiting"
    # The last two, done in one transaction: the callback is released by its commit.
    async with conn.transaction():
        await end_as_done(conn, schema, second)
        await end_as_done(conn, schema, third)
        assert await status_of(conn, schema, callback) == "waiting"  # until the commit
    done = await queue.get_workflow(wid)
    assert (done.groups[0].remaining, done.groups[0].failed, done.groups[0].status) == (
        0,
        0,
        "done",
    )
    assert await status_of(conn, schema, callback) == "pending"

    @queue.task(name="wf.callback")
    async def results(ctx: JobContext) -> dict[str, Any]:
        return {str(k): v for k, v in (await ctx.parent_results()).items()}

    await queue.worker(queues=["default"]).run(burst=True)
    assert (await queue.get_job(callback)).result == {str(m): "ok" for m in members}


async def test_a_group_keeps_its_members_results_when_retention_deletes_them(
    queue: Queue,
) -> None:
    """A member done by the hot path has its result in its jobs row only; retention that
    deletes the row keeps the result for the group's dependents."""

    @queue.task(name="wf.kept.member", queue="members")
    async def member(n: int) -> int:
        return n * 10

    @queue.task(name="wf.kept.callback", queue="callbacks")
    async def callback(ctx: JobContext) -> dict[str, Any]:
        return {str(k): v for k, v in (await ctx.parent_results()).items()}

    wf = queue.workflow("kept")
    group = wf.add_many(member, [{"n": n} for n in range(3)])
    wf.add(callback, depends_on=[group])
    wid = await wf.enqueue()
    await queue.worker(queues=["members"], retention=0).run(burst=True)
    members = sorted(j.id for j in (await queue.get_workflow(wid)).jobs if j.group is not None)
    # A maintenance pass of a worker that keeps done rows 0 s: the members' rows go.
    async with running(queue, queues=["nothing"], retention=0, maintenance_interval=0.05):

        async def pruned() -> bool:
            jobs = (await queue.get_workflow(wid)).jobs
            return all(j.status is None for j in jobs if j.group is not None)

        await eventually(pruned, within=20)
    await queue.worker(queues=["callbacks"]).run(burst=True)
    done = await queue.get_workflow(wid)
    (ran,) = [j for j in done.jobs if j.group is None]
    assert ran.status is JobStatus.DONE
    assert (await queue.result(ran.id)) == {str(m): n * 10 for n, m in enumerate(members)}


async def test_a_member_that_a_later_job_depends_on_releases_it_and_counts(
    queue: Queue,
) -> None:
    @queue.task(name="wf.member")
    async def member() -> int:
        return 7

    @queue.task(name="wf.callback")
    async def callback(ctx: JobContext) -> int:
        return sum((await ctx.parent_results()).values())

    @queue.task(name="wf.later")
    async def later(ctx: JobContext) -> int:
        return sum((await ctx.parent_results()).values())

    wid, members, callback_id = await group_of_three(queue)
    child = await later.enqueue(depends_on=[members[0]])
    assert child.status is JobStatus.WAITING
    async with running(queue):
        done = await queue.wait_for_workflow(wid, timeout=30)
        assert done.status == "done"
        assert (await queue.wait_for_job(child.id, timeout=30)).status is JobStatus.DONE
    assert (await queue.get_job(child.id)).result == 7
    assert (await queue.get_job(callback_id)).result == 21
