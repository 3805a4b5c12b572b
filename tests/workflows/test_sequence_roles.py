"""Sequences under least privilege: a producer role (grant_producer) enqueues jobs of a
sequence, from Python and SQL, and a worker role (grant_worker) runs, holds and releases
them; the producer cannot use sequences to touch jobs it did not enqueue."""

from __future__ import annotations

import asyncpg
import pytest

from aiopgq import JobStatus, Queue


async def test_a_producer_and_a_worker_role_run_a_sequence_that_a_failure_holds(
    dsn: str, queue: Queue, roles: tuple[str, str]
) -> None:
    producer, worker = roles
    producing = Queue(dsn, schema=queue.schema, connect_kwargs={"user": producer})
    working = Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker})
    ran: list[int] = []

    @working.task(name="step", max_attempts=1)
    async def step(n: int) -> None:
        ran.append(n)
        if n == 1:
            raise RuntimeError("no")

    async with producing, working:
        first = await producing.enqueue("step", {"n": 0}, sequence_key="k", max_attempts=1)
        rest = await producing.enqueue_many(
            "step", [{"n": 1}, {"n": 2}], sequence_key="k", max_attempts=1
        )
        as_producer = await asyncpg.connect(dsn, user=producer)
        try:
            by_sql = await as_producer.fetchval(
                f"SELECT \"{queue.schema}\".enqueue('step', '{{\"n\": 3}}', max_attempts => 1, "
                "sequence_key => 'k')"
            )
        finally:
            await as_producer.close()
        assert [job.status for job in (first, *rest)] == [
            JobStatus.PENDING,
            JobStatus.WAITING,
            JobStatus.WAITING,
        ]
        await working.worker(poll_interval=0.05).run(burst=True)
        assert ran == [0, 1]
        assert (await working.get_job(rest[1].id)).status is JobStatus.WAITING
        assert await working.cancel(rest[0].id)  # the worker role cancels the failed job
        await working.worker(poll_interval=0.05).run(burst=True)
        assert ran == [0, 1, 2, 3]
        assert (await working.get_job(by_sql)).status is JobStatus.DONE


async def test_a_producer_cannot_sequence_or_lock_jobs_it_did_not_enqueue(
    dsn: str, queue: Queue, roles: tuple[str, str]
) -> None:
    producer, _ = roles
    others = await queue.enqueue("step", {}, delay=3600)  # the schema owner's job
    schema = f'"{queue.schema}"'
    as_producer = await asyncpg.connect(dsn, user=producer)
    try:
        with pytest.raises(asyncpg.InvalidParameterValueError, match="cannot join a sequence"):
            await as_producer.fetch(
                f"SELECT * FROM {schema}.add_to_sequence(ARRAY[$1]::bigint[], 'k')", others.id
            )
        for call in (
            f"SELECT * FROM {schema}.sequence_predecessors($1)",
            f"SELECT {schema}.lock_sequence_parents($1)",
            f"SELECT {schema}.splice_sequences(ARRAY[$1]::bigint[])",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await as_producer.execute(call, others.id)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await as_producer.fetch(f"SELECT * FROM {schema}.sequences")
        # Its own job behind the owner's job of the key: it waits; the owner's job is untouched.
        await queue.enqueue("step", {}, sequence_key="shared", delay=3600)
        mine = await as_producer.fetchval(
            f"SELECT {schema}.enqueue('step', sequence_key => 'shared')"
        )
    finally:
        await as_producer.close()
    assert (await queue.get_job(mine)).status is JobStatus.WAITING
    assert (await queue.get_job(others.id)).status is JobStatus.PENDING
