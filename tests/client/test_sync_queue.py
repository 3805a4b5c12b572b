"""SyncQueue: producers that are not asyncio enqueue with the same checks, in their own
psycopg transaction, and wake the workers like any insert."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import anyio
import psycopg
import pytest

from aiopgq import ConfigurationError, JobStatus, Queue, SchemaError, SyncQueue, TaskNotFound

from ..support.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pg(dsn: str) -> Iterator[psycopg.Connection]:
    """The application's own psycopg connection (transactions are the caller's)."""
    with psycopg.connect(dsn) as conn:
        yield conn


async def count_jobs(queue: Queue) -> int:
    return int(await queue.pool.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs'))


async def test_rolled_back_transaction_leaves_no_job_and_committed_one_runs_at_once(
    dsn: str, queue: Queue, pg: psycopg.Connection
) -> None:
    started: list[float] = []
    first_start = anyio.Event()

    @queue.task(name="sync.hello")
    async def hello(name: str) -> str:
        started.append(time.monotonic())
        first_start.set()
        return f"hello {name}"

    producer = SyncQueue(dsn, schema=queue.schema)

    def rolled_back() -> None:
        with pytest.raises(ZeroDivisionError), pg.transaction():
            producer.enqueue("sync.hello", {"name": "nobody"}, connection=pg)
            raise ZeroDivisionError  # the caller's own work fails: the job goes with it

    def committed() -> tuple[int, float]:
        with pg.transaction():
            job = producer.enqueue("sync.hello", {"name": "sync"}, connection=pg)
            assert producer.get_job(job.id, connection=pg).status is JobStatus.PENDING
        return job.id, time.monotonic()

    # Polling every 30 s: only the insert trigger's NOTIFY can start the job sooner.
    async with queue.worker(poll_interval=30):
        await anyio.to_thread.run_sync(rolled_back)
        assert await count_jobs(queue) == 0
        job_id, committed_at = await anyio.to_thread.run_sync(committed)
        with anyio.fail_after(10):
            await first_start.wait()
        assert started[0] - committed_at < 5  # well under the 30 s poll interval

        async def done() -> bool:
            return (await queue.get_job(job_id)).status is JobStatus.DONE

        await eventually(done)
    assert (await queue.get_job(job_id)).result == "hello sync"
    assert producer.get_job(job_id).result == "hello sync"  # its own connection
    producer.close()


async def test_same_checks_and_errors_as_queue(dsn: str, queue: Queue) -> None:
    @queue.task(name="sync.add", queue="adds", max_attempts=3)
    async def add(a: int, b: int = 0) -> int:
        return a + b

    with SyncQueue.from_queue(queue) as producer:
        for bad, error, message in [
            ({"a": 1, "c": 2}, TypeError, "task sync.add: got an unexpected keyword argument 'c'"),
            ({"b": 1}, TypeError, "missing a required argument: 'a'"),
            ({"a": object()}, TypeError, "argument 'a' cannot be stored as JSON"),
            ({"a": "\x00"}, ValueError, "argument 'a' contains a NUL character"),
            ({"a": "x" * 2_000_000}, ValueError, "over the 1000000-byte limit"),
        ]:
            with pytest.raises(error) as info:
                producer.enqueue("sync.add", bad)
            assert message in str(info.value)
            with pytest.raises(error) as again:  # the asyncio Queue says the same
                await queue.enqueue("sync.add", bad)
            assert str(again.value) == str(info.value)
        with pytest.raises(ValueError, match="naive datetime"):
            producer.enqueue("sync.add", {"a": 1}, run_at=datetime(2030, 1, 1))
        with pytest.raises(ValueError, match="priority must fit in 32 bits"):
            producer.enqueue("sync.add", {"a": 1}, priority=2**40)
        assert await count_jobs(queue) == 0

        job = producer.enqueue("sync.add", {"a": 1, "b": 2}, delay=timedelta(seconds=60))
        assert (job.queue, job.max_attempts, job.payload) == ("adds", 3, {"a": 1, "b": 2})
        assert job.run_at > datetime.now(timezone.utc) + timedelta(seconds=50)
        keyed = producer.enqueue("sync.add", {"a": 5}, idempotency_key="k")
        assert producer.enqueue("sync.add", {"a": 5}, idempotency_key="k").id == keyed.id
        jobs = producer.enqueue_many("sync.add", [{"a": i} for i in range(100)], priority=7)
        assert [j.payload["a"] for j in jobs] == list(range(100))
        assert {(await queue.get_job(j.id)).priority for j in jobs[:3]} == {7}
        assert producer.enqueue_many("sync.add", []) == []
    assert await count_jobs(queue) == 102


async def test_declarations_of_the_registry_apply_and_unknown_names_are_refused(
    dsn: str, queue: Queue
) -> None:
    @queue.task(name="sync.mail", queue="emails", max_attempts=2)
    async def mail(to: str) -> None: ...

    await queue.worker(queues=["none"]).run(burst=True)  # registers sync.mail
    with SyncQueue(dsn, schema=queue.schema) as producer:  # knows no task itself
        job = producer.enqueue("sync.mail", {"to": "a@example.com"})
        assert (job.queue, job.max_attempts) == ("emails", 2)
        with pytest.raises(TypeError, match="unexpected keyword argument 'cc'"):
            producer.enqueue("sync.mail", {"to": "a", "cc": "b"})
        with pytest.raises(TaskNotFound, match=r"known: sync\.mail"):
            producer.enqueue("sync.mial", {"to": "a"})
        [other] = producer.enqueue_many("sync.mail", [{"to": "b"}], queue="urgent")
        assert (other.queue, other.max_attempts) == ("urgent", 2)


async def test_threads_share_the_queues_own_connection(dsn: str, queue: Queue) -> None:
    producer = SyncQueue(dsn, schema=queue.schema)

    def produce(n: int) -> None:
        for i in range(25):
            producer.enqueue("sync.threads", {"n": n, "i": i})

    def run_threads() -> None:
        threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    await anyio.to_thread.run_sync(run_threads)
    producer.close()
    assert await count_jobs(queue) == 100


async def test_setup_errors_name_the_fix(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SchemaError, match="run `aiopgq migrate`"):
        SyncQueue(dsn, schema=schema).enqueue("t", {})  # schema not migrated
    monkeypatch.delenv("AIOPGQ_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="no database given"):
        SyncQueue().enqueue("t", {})
    with pytest.raises(ConfigurationError, match="cannot connect to") as info:
        SyncQueue("postgresql://u:hunter2@127.0.0.1:1/db").enqueue("t", {})
    assert "hunter2" not in str(info.value)
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        SyncQueue("postgresql://127.0.0.1/db", schema="no-such schema")


async def test_a_held_key_returns_the_stored_job_as_queue_does(queue: Queue) -> None:
    @queue.task(name="sync.keyed")
    async def keyed(n: int) -> None: ...

    with SyncQueue.from_queue(queue) as producer:
        first = producer.enqueue("sync.keyed", {"n": 1}, idempotency_key="k-1")
        again = producer.enqueue("sync.keyed", {"n": 2}, idempotency_key="k-1")
    assert again.id == first.id
    assert again.payload == {"n": 1}  # the stored job, not the caller's arguments
    assert (await queue.enqueue("sync.keyed", {"n": 3}, idempotency_key="k-1")).id == first.id
    assert await count_jobs(queue) == 1
