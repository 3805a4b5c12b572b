"""Unique jobs: idempotency keys on every enqueue path, on_conflict, unique_for, races."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import asyncpg
import pytest

from aiopgq import DuplicateJob, JobStatus, Queue

from ..support.helpers import eventually


async def count_jobs(conn: asyncpg.Connection, queue: Queue, key: str | None = None) -> int:
    if key is None:
        return int(await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs'))
    return int(
        await conn.fetchval(
            f'SELECT count(*) FROM "{queue.schema}".jobs WHERE idempotency_key = $1', key
        )
    )


async def test_a_held_key_returns_the_stored_job_not_the_callers_arguments(queue: Queue) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @queue.task(name="held.job", queue="first")
    async def held(n: int) -> None:
        started.set()
        await release.wait()

    first = await queue.enqueue("held.job", {"n": 1}, priority=1, idempotency_key="k")
    async with queue.worker(queues=["first"]):
        await asyncio.wait_for(started.wait(), 20)
        again = await queue.enqueue(
            "held.job", {"n": 2}, queue="second", priority=9, idempotency_key="k"
        )
        release.set()
    # The job that holds the key, as stored: not a Job made of this call's arguments.
    assert again.id == first.id
    assert again.payload == {"n": 1}
    assert (again.queue, again.priority) == ("first", 1)
    assert again.status is JobStatus.RUNNING
    assert again.attempts == 1
    assert again.created_at == first.created_at


async def test_enqueue_many_takes_one_key_per_item(queue: Queue, conn: asyncpg.Connection) -> None:
    @queue.task(name="many.keys")
    async def many(n: int) -> None:
        pass

    old = await many.enqueue(0, idempotency_key="b")
    jobs = await many.enqueue_many(
        [{"n": n} for n in range(1, 9)],
        idempotency_keys=["a", "b", None, "a", "c", None, None, "c"],
    )
    expected = [1, 0, 3, 1, 5, 6, 7, 5]
    assert [job.payload for job in jobs] == [{"n": n} for n in expected]
    assert jobs[1].id == old.id  # held before the call
    assert jobs[3].id == jobs[0].id and jobs[7].id == jobs[4].id  # by an earlier item
    assert len({job.id for job in jobs} | {old.id}) == 6
    assert await count_jobs(conn, queue) == 6
    for job in jobs:
        stored = await queue.get_job(job.id)
        assert (stored.payload, stored.status) == (job.payload, JobStatus.PENDING)
    # Without keys the batch path is the plain one; with them, the lists must match.
    assert len(await many.enqueue_many([{"n": 6}] * 3)) == 3
    with pytest.raises(ValueError, match="3 payloads but 2 idempotency keys"):
        await many.enqueue_many([{"n": 7}] * 3, idempotency_keys=["x", "y"])
    with pytest.raises(TypeError, match="not a str"):
        await many.enqueue_many([{"n": 7}], idempotency_keys="x")  # type: ignore[arg-type]


async def test_copy_many_with_keys_counts_the_jobs_it_created(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="copy.keys")
    async def copied(n: int) -> None:
        pass

    await copied.enqueue(0, idempotency_key="k-1")
    created = await copied.copy_many(
        ({"n": i} for i in range(1, 1001)),
        idempotency_keys=[f"k-{i % 500}" for i in range(1, 1001)],
    )
    assert created == 499  # k-0 ... k-499, of which k-1 was held
    assert await count_jobs(conn, queue) == 500
    assert (await queue.get_job((await copied.enqueue(9, idempotency_key="k-1")).id)).payload == {
        "n": 0
    }


async def test_sql_function_takes_a_key_and_old_calls_still_work(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    schema = f'"{queue.schema}"'
    positional = await conn.fetchval(
        f"SELECT {schema}.enqueue('sql.t', '{{\"n\": 1}}', 'default', now(), 0, 5)"
    )
    named = await conn.fetchval(f"SELECT {schema}.enqueue('sql.t', queue => 'q', priority => 2)")
    keyed = [
        await conn.fetchval(
            f"SELECT {schema}.enqueue('sql.t', $1::jsonb, idempotency_key => 'sql-k')",
            f'{{"n": {n}}}',
        )
        for n in range(3)
    ]
    assert len({positional, named, keyed[0]}) == 3
    assert keyed == [keyed[0]] * 3
    assert (await queue.get_job(keyed[0])).payload == {"n": 0}
    with pytest.raises(asyncpg.UniqueViolationError, match="held by job"):
        await conn.fetchval(
            f"SELECT {schema}.enqueue('sql.t', idempotency_key => 'sql-k', on_conflict => 'raise')"
        )
    with pytest.raises(asyncpg.InvalidParameterValueError, match="need an idempotency_key"):
        await conn.fetchval(f"SELECT {schema}.enqueue('sql.t', on_conflict => 'raise')")


async def test_replace_updates_a_pending_job_and_leaves_a_running_one(queue: Queue) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    seen: list[int] = []

    @queue.task(name="replace.me")
    async def replace_me(n: int) -> None:
        seen.append(n)
        started.set()
        await release.wait()

    first = await replace_me.enqueue(1, idempotency_key="r", delay=3600)
    replaced = await replace_me.enqueue(2, idempotency_key="r", on_conflict="replace")
    assert replaced.id == first.id
    assert replaced.payload == {"n": 2}
    assert replaced.run_at < first.run_at  # now, instead of in an hour
    assert (await queue.get_job(first.id)).payload == {"n": 2}

    async with queue.worker():
        await asyncio.wait_for(started.wait(), 20)
        running = await replace_me.enqueue(3, idempotency_key="r", on_conflict="replace")
        assert (running.id, running.status, running.payload) == (
            first.id,
            JobStatus.RUNNING,
            {"n": 2},
        )
        release.set()
    assert seen == [2]
    # Within one call, the items of a key settle in order: the last one's payload wins.
    batch = await replace_me.enqueue_many(
        [{"n": 4}, {"n": 5}, {"n": 6}], idempotency_keys=["b", "b", "b"], on_conflict="replace"
    )
    assert {job.id for job in batch} == {batch[0].id}
    assert [job.payload for job in batch] == [{"n": 6}] * 3
    assert (await queue.get_job(batch[0].id)).payload == {"n": 6}


async def test_raise_names_the_holder_and_enqueues_nothing(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="raise.me")
    async def raise_me(n: int) -> None:
        pass

    holder = await raise_me.enqueue(1, idempotency_key="x")
    with pytest.raises(DuplicateJob, match="held by job") as info:
        await raise_me.enqueue(2, idempotency_key="x", on_conflict="raise")
    assert (info.value.job.id, info.value.job.payload) == (holder.id, {"n": 1})
    assert info.value.job.status is JobStatus.PENDING
    assert info.value.job.created_at == holder.created_at
    # A batch is all or nothing: the fresh keys before the duplicate are not enqueued.
    with pytest.raises(DuplicateJob) as info:
        await raise_me.enqueue_many(
            [{"n": 3}, {"n": 4}, {"n": 5}], idempotency_keys=["y", "x", "z"], on_conflict="raise"
        )
    assert info.value.job.id == holder.id
    assert await count_jobs(conn, queue) == 1


async def test_unique_for_keeps_the_key_of_a_done_job_for_that_long(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="report.daily")
    async def report(day: str) -> None:
        pass

    first = await report.enqueue("mon", idempotency_key="report", unique_for=timedelta(hours=1))
    await queue.worker().run(burst=True)
    assert (await queue.get_job(first.id)).status is JobStatus.DONE
    again = await report.enqueue("tue", idempotency_key="report", unique_for=3600)
    assert (again.id, again.status, again.payload) == (first.id, JobStatus.DONE, {"day": "mon"})
    # Finished two hours ago: the window is over, the key is free again.
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '2 hours' "
        "WHERE id = $1",
        first.id,
    )
    fresh = await report.enqueue("wed", idempotency_key="report", unique_for=3600)
    assert fresh.id != first.id and fresh.status is JobStatus.PENDING
    # Without unique_for a done job lets go of its key at once; failed ones always do.
    plain = await report.enqueue("x", idempotency_key="plain")
    await queue.worker().run(burst=True)
    assert (await report.enqueue("y", idempotency_key="plain")).id != plain.id


async def test_failed_job_releases_its_key_even_with_a_window(queue: Queue) -> None:
    @queue.task(name="fails.once", max_attempts=1)
    async def fails() -> None:
        raise RuntimeError("no")

    job = await fails.enqueue(idempotency_key="f", unique_for=3600)
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED
    assert (await fails.enqueue(idempotency_key="f", unique_for=3600)).id != job.id


async def test_pruner_keeps_a_done_job_while_its_key_is_held(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="prune.me")
    async def prune_me(n: int) -> None:
        pass

    kept = await prune_me.enqueue(1, idempotency_key="keep", unique_for=3600)
    gone = await prune_me.enqueue(2, idempotency_key="go")
    await queue.worker().run(burst=True)
    async with queue.worker(retention=0, maintenance_interval=0.05):

        async def pruned() -> bool:
            return (
                await conn.fetchval(
                    f'SELECT count(*) FROM "{queue.schema}".jobs WHERE id = $1', gone.id
                )
                == 0
            )

        await eventually(pruned)
    assert (await queue.get_job(kept.id)).status is JobStatus.DONE
    assert (await prune_me.enqueue(3, idempotency_key="keep")).id == kept.id
    keys = await conn.fetch(f'SELECT key FROM "{queue.schema}".job_keys ORDER BY key')
    assert [row["key"] for row in keys] == ["keep"]  # the pruned job's key row went with it


async def test_sixteen_connections_enqueue_one_key_at_once(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    connections = [await asyncpg.connect(dsn) for _ in range(16)]
    try:
        for round_ in range(20):
            key = f"race-{round_}"
            gate = asyncio.Event()

            async def enqueue(
                c: asyncpg.Connection, n: int, key: str = key, gate: asyncio.Event = gate
            ) -> int:
                await gate.wait()
                job = await queue.enqueue("race.t", {"n": n}, connection=c, idempotency_key=key)
                return job.id

            calls = [asyncio.create_task(enqueue(c, n)) for n, c in enumerate(connections)]
            await asyncio.sleep(0.01)
            gate.set()
            ids = await asyncio.gather(*calls)
            assert len(set(ids)) == 1, ids
            assert await count_jobs(conn, queue, key) == 1

        # The same while the first holder's transaction is still open: the others wait
        # for its commit, then all get its id.
        async with connections[0].transaction():
            first = await queue.enqueue(
                "race.t", {"n": -1}, connection=connections[0], idempotency_key="open"
            )
            waiting = [
                asyncio.create_task(
                    queue.enqueue("race.t", {"n": n}, connection=c, idempotency_key="open")
                )
                for n, c in enumerate(connections[1:])
            ]
            await asyncio.sleep(0.2)
            assert not any(task.done() for task in waiting)
        assert {job.id for job in await asyncio.gather(*waiting)} == {first.id}
    finally:
        for c in connections:
            await c.close()


async def test_a_rolled_back_holder_lets_the_waiting_enqueue_insert(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    other = await asyncpg.connect(dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        await queue.enqueue("rb.t", {"n": 1}, connection=conn, idempotency_key="rb")
        waiting = asyncio.create_task(
            queue.enqueue("rb.t", {"n": 2}, connection=other, idempotency_key="rb")
        )
        await asyncio.sleep(0.2)
        await tx.rollback()
        job = await asyncio.wait_for(waiting, 20)
    finally:
        await other.close()
    assert job.payload == {"n": 2}
    assert (await queue.get_job(job.id)).payload == {"n": 2}


async def test_bad_unique_options_name_the_fix(queue: Queue) -> None:
    with pytest.raises(ValueError, match="apply to jobs with an idempotency key"):
        await queue.enqueue("t", {}, on_conflict="raise")
    with pytest.raises(ValueError, match="apply to jobs with an idempotency key"):
        await queue.enqueue("t", {}, unique_for=60)
    with pytest.raises(ValueError, match="on_conflict must be one of"):
        await queue.enqueue("t", {}, idempotency_key="k", on_conflict="update")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unique_for must be positive"):
        await queue.enqueue("t", {}, idempotency_key="k", unique_for=timedelta(0))
    with pytest.raises(TypeError, match="must be a str"):
        await queue.enqueue("t", {}, idempotency_key=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1000-byte limit"):
        await queue.enqueue("t", {}, idempotency_key="k" * 1001)
    with pytest.raises(TypeError, match="clashes with the enqueue option"):

        @queue.task(name="bad.param")
        async def bad(unique_for: int) -> None:
            pass

    # The key travels as a bind parameter, whatever it holds.
    job = await queue.enqueue("t", {}, idempotency_key="'; DROP TABLE jobs; --")
    assert job.id == (await queue.enqueue("t", {}, idempotency_key="'; DROP TABLE jobs; --")).id
    assert job.run_at <= datetime.now(timezone.utc)
