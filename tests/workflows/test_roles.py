"""Dependencies under least privilege: a producer role (grant_producer) gives its jobs
parents, and a worker role (grant_worker) releases and cancels them."""

from __future__ import annotations

import asyncpg
import pytest

from aiopgq import JobContext, JobStatus, Queue


async def test_a_producer_and_a_worker_role_run_a_graph(
    dsn: str, queue: Queue, roles: tuple[str, str]
) -> None:
    producer, worker = roles
    producing = Queue(dsn, schema=queue.schema, connect_kwargs={"user": producer})
    working = Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker})

    @working.task(name="make", max_attempts=1)
    async def make(fail: bool = False) -> int:
        if fail:
            raise RuntimeError("no")
        return 1

    async with producing, working:
        good = await producing.enqueue("make", {})
        bad = await producing.enqueue("make", {"fail": True}, max_attempts=1)
        child = await producing.enqueue("make", {}, depends_on=good)
        doomed = await producing.enqueue("make", {}, depends_on=[good, bad])
        as_producer = await asyncpg.connect(dsn, user=producer)
        try:
            by_sql = await as_producer.fetchval(
                f"SELECT \"{queue.schema}\".enqueue('make', depends_on => ARRAY[$1]::bigint[])",
                child.id,
            )
        finally:
            await as_producer.close()
        assert child.status is JobStatus.WAITING
        await working.worker(poll_interval=0.05).run(burst=True)
        assert (await working.get_job(child.id)).status is JobStatus.DONE
        assert (await working.get_job(by_sql)).status is JobStatus.DONE
        assert (await working.get_job(doomed.id)).status is JobStatus.CANCELLED


async def test_a_producer_role_enqueues_a_workflow_that_a_worker_role_runs(
    dsn: str, queue: Queue, roles: tuple[str, str]
) -> None:
    producer, worker = roles
    producing = Queue(dsn, schema=queue.schema, connect_kwargs={"user": producer})
    working = Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker})

    @working.task(name="part")
    async def part(n: int) -> int:
        return n

    @working.task(name="sum")
    async def total(ctx: JobContext) -> int:
        return sum((await ctx.parent_results()).values())

    async with producing, working:
        wf = producing.workflow("least privilege")
        group = wf.add_many("part", [{"n": n} for n in range(5)])
        wf.add("sum", depends_on=[group])
        wid = await wf.enqueue()
        callback_id = next(
            job.id for job in (await working.get_workflow(wid)).jobs if job.task == "sum"
        )
        as_producer = await asyncpg.connect(dsn, user=producer)
        try:  # enqueued_by is the producer (not the definer's owner): it sees its job
            status = await as_producer.fetchval(
                f'SELECT status FROM "{queue.schema}".job_status($1)', callback_id
            )
        finally:
            await as_producer.close()
        assert status == "waiting"
        refused = working.workflow("no insert")  # a worker role may not insert jobs
        refused.add("part", n=1)
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="grant_producer"):
            await refused.enqueue()
        await working.worker(poll_interval=0.05).run(burst=True)
        done = await working.get_workflow(wid)
        assert done.status == "done", done.counts
        callback = next(job for job in done.jobs if job.task == "sum")
        assert (await working.get_job(callback.id)).result == 10
        assert await working.cancel_workflow(wid) == 0
