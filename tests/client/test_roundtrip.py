from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import asyncpg

from aiopgq import JobStatus, Queue, current_job


async def test_enqueue_and_run_round_trip(queue: Queue) -> None:
    seen: list[tuple[int, int, int]] = []

    @queue.task(name="demo.add")
    async def add(a: int, b: int) -> int:
        seen.append((current_job().id, a, b))
        return a + b

    job = await add.enqueue(1, b=2)
    await queue.worker(concurrency=5).run(burst=True)

    assert seen == [(job.id, 1, 2)]
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE
    assert done.result == 3
    assert done.attempts == 1
    assert done.finished_at is not None


async def test_sync_handler_runs_in_a_thread(queue: Queue) -> None:
    import threading

    threads: list[int] = []

    @queue.task(name="demo.sync")
    def blocking(x: int) -> int:
        threads.append(threading.get_ident())
        return x * 2

    job = await blocking.enqueue(x=21)
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).result == 42
    assert threads and threads[0] != threading.get_ident()


async def test_enqueue_by_name_and_many(queue: Queue) -> None:
    results: list[int] = []

    @queue.task(name="demo.collect")
    async def collect(n: int) -> None:
        results.append(n)

    await queue.enqueue("demo.collect", {"n": -1})
    jobs = await collect.enqueue_many([{"n": i} for i in range(500)])
    assert len({j.id for j in jobs}) == 500
    for job in jobs[::50]:  # each returned id is the row of that payload
        assert (await queue.get_job(job.id)).payload == job.payload
    assert await collect.copy_many({"n": i} for i in range(500, 600)) == 100
    await queue.worker(concurrency=50).run(burst=True)
    assert sorted(results) == [-1, *range(600)]


async def test_delay_and_run_at_are_respected(queue: Queue) -> None:
    @queue.task(name="demo.later")
    async def later() -> None:
        pass

    future = await later.enqueue(delay=timedelta(hours=1))
    at = await later.enqueue(run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    now = await later.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(now.id)).status is JobStatus.DONE
    assert (await queue.get_job(future.id)).status is JobStatus.PENDING
    assert (await queue.get_job(at.id)).status is JobStatus.PENDING


async def test_priority_orders_the_dequeue(queue: Queue) -> None:
    order: list[int] = []

    @queue.task(name="demo.prio")
    async def prio(p: int) -> None:
        order.append(p)

    for p in (0, 5, -3, 9):
        await prio.enqueue(p=p, priority=p)
    await queue.worker(concurrency=1).run(burst=True)
    assert order == [9, 5, 0, -3]


async def test_transactional_enqueue_rolls_back_with_the_caller(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="demo.tx")
    async def tx(n: int) -> None:
        pass

    class Boom(Exception):
        pass

    try:
        async with conn.transaction():
            await tx.enqueue(1, connection=conn)
            raise Boom
    except Boom:
        pass
    async with conn.transaction():
        kept = await tx.enqueue(2, connection=conn)
    count = await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs')
    assert count == 1
    assert (await queue.get_job(kept.id)).payload == {"n": 2}


async def test_sql_function_enqueue_from_a_plain_connection(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    got: list[dict[str, int]] = []

    @queue.task(name="demo.sql")
    async def from_sql(a: int) -> None:
        got.append({"a": a})

    job_id = await conn.fetchval(
        f"SELECT \"{queue.schema}\".enqueue('demo.sql', '{{\"a\": 7}}'::jsonb, queue => 'default', "
        "run_at => now(), priority => 3)"
    )
    await queue.worker().run(burst=True)
    assert got == [{"a": 7}]
    assert (await queue.get_job(job_id)).status is JobStatus.DONE


async def test_idempotency_key_returns_the_live_job(queue: Queue) -> None:
    @queue.task(name="demo.once")
    async def once() -> None:
        pass

    first = await once.enqueue(idempotency_key="k1")
    second = await once.enqueue(idempotency_key="k1")
    assert first.id == second.id
    await queue.worker().run(burst=True)
    third = await once.enqueue(idempotency_key="k1")  # the first one finished: a new job
    assert third.id != first.id


async def test_cancel_pending_job(queue: Queue) -> None:
    ran: list[int] = []

    @queue.task(name="demo.cancel")
    async def c(n: int) -> None:
        ran.append(n)

    job = await c.enqueue(1)
    assert await queue.cancel(job.id)
    await queue.worker().run(burst=True)
    assert ran == []
    assert (await queue.get_job(job.id)).status is JobStatus.CANCELLED


async def test_worker_in_background_context(queue: Queue) -> None:
    done = asyncio.Event()

    @queue.task(name="demo.bg")
    async def bg() -> None:
        done.set()

    async with queue.worker(poll_interval=30):
        await bg.enqueue()
        await asyncio.wait_for(done.wait(), 10)


async def test_queue_on_an_existing_pool_with_its_own_jsonb_codec(dsn: str, queue: Queue) -> None:
    import json

    async def init(conn: asyncpg.Connection) -> None:  # an app's own codec must not matter
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4, init=init)
    try:
        shared = Queue(pool=pool, schema=queue.schema)
        done = asyncio.Event()

        @shared.task(name="on.pool")
        async def on_pool(data: dict[str, int]) -> dict[str, int]:
            done.set()
            return data

        async with shared.worker(poll_interval=30) as worker:
            assert worker.listener is not None and worker.listener.connected.is_set()
            job = await on_pool.enqueue({"x": 1})
            await asyncio.wait_for(done.wait(), 10)  # woken by NOTIFY on its own connection
        finished = await shared.get_job(job.id)
        assert finished.payload == {"data": {"x": 1}}
        await asyncio.sleep(0.05)
        assert (await shared.get_job(job.id)).result == {"x": 1}
        assert not pool._closed  # type: ignore[attr-defined]  # the queue leaves it open
    finally:
        await pool.close()


async def test_a_running_job_sees_its_stored_timestamps_to_the_microsecond(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    seen: dict[int, tuple[datetime, datetime]] = {}

    @queue.task(name="stamps")
    async def stamps(n: int) -> None:
        job = current_job()
        seen[job.id] = (job.run_at, job.created_at)

    base = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    jobs = [
        await stamps.enqueue(n=n, run_at=base - timedelta(microseconds=n * 7919)) for n in range(40)
    ]
    jobs += await stamps.enqueue_many([{"n": n} for n in range(40, 80)])  # shared timestamps
    # A run_at that only SQL can write: decoded as asyncpg decodes it.
    minus_infinity = await conn.fetchval(
        f'INSERT INTO "{queue.schema}".jobs (task, payload, run_at) '
        "VALUES ('stamps', '{\"n\": 80}', '-infinity') RETURNING id"
    )
    await queue.worker(concurrency=20).run(burst=True)
    for job in jobs:
        stored = await queue.get_job(job.id)
        assert seen[job.id] == (stored.run_at, stored.created_at) == (job.run_at, job.created_at)
    assert seen[minus_infinity][0] == (await queue.get_job(minus_infinity)).run_at == datetime.min
