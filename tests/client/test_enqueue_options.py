"""The enqueue options, one definition: every path takes every option (Queue, Task,
SyncQueue), names a wrong one, and a job's concurrency key shows on its Job."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from aiopgq import DuplicateJob, Queue, SyncQueue
from aiopgq._enqueue_options import OPTION_NAMES


async def test_task_enqueue_takes_a_queue_and_max_attempts_per_call(queue: Queue) -> None:
    @queue.task(name="opt.add", queue="math", max_attempts=3)
    async def add(a: int, b: int) -> int:
        return a + b

    default = await add.enqueue(1, b=2)
    moved = await add.enqueue(1, b=2, queue="urgent", max_attempts=9, priority=4)
    assert (default.queue, default.max_attempts, default.priority) == ("math", 3, 0)
    assert (moved.queue, moved.max_attempts, moved.priority) == ("urgent", 9, 4)
    stored = await queue.get_job(moved.id)
    assert (stored.queue, stored.max_attempts, stored.payload) == ("urgent", 9, {"a": 1, "b": 2})


async def test_an_unknown_option_is_named_on_every_path(queue: Queue) -> None:
    @queue.task(name="opt.noop")
    async def noop() -> None: ...

    options: dict[str, Any] = {"prioritty": 3}
    with pytest.raises(TypeError, match=r"enqueue\(\) got unknown option 'prioritty'"):
        await queue.enqueue("opt.noop", None, **options)
    with pytest.raises(TypeError, match=r"enqueue_many\(\) got unknown option 'prioritty'"):
        await queue.enqueue_many("opt.noop", [{}], **options)
    with pytest.raises(TypeError, match=r"copy_many\(\) got unknown option 'prioritty'"):
        await noop.copy_many([{}], **options)
    with pytest.raises(TypeError, match="prioritty"):  # Task.enqueue: taken for an argument
        await noop.enqueue(**options)
    assert await queue.list_jobs() == []


def test_a_task_parameter_named_like_an_option_is_refused(queue: Queue) -> None:
    for name in ("queue", "max_attempts", "concurrency_key"):
        assert name in OPTION_NAMES
    with pytest.raises(TypeError, match="parameter 'queue' clashes with the enqueue option"):

        @queue.task(name="opt.clash")
        async def clash(queue: str) -> None: ...


async def test_the_concurrency_key_shows_on_the_job_from_every_path(queue: Queue) -> None:
    @queue.task(name="opt.keyed")
    async def keyed(n: int) -> None: ...

    one = await keyed.enqueue(1, concurrency_key="tenant:1")
    many = await keyed.enqueue_many([{"n": 2}], concurrency_key="tenant:2")
    unique = await keyed.enqueue(3, idempotency_key="k3", concurrency_key="tenant:3")
    assert [one.concurrency_key, many[0].concurrency_key, unique.concurrency_key] == [
        "tenant:1",
        "tenant:2",
        "tenant:3",
    ]
    for job, key in ((one, "tenant:1"), (many[0], "tenant:2"), (unique, "tenant:3")):
        assert (await queue.get_job(job.id)).concurrency_key == key
    listed = {job.id: job.concurrency_key for job in await queue.list_jobs()}
    assert listed == {one.id: "tenant:1", many[0].id: "tenant:2", unique.id: "tenant:3"}


async def test_sync_queue_takes_the_same_options(dsn: str, queue: Queue) -> None:
    @queue.task(name="opt.sync", queue="mail")
    async def send(to: str) -> None: ...

    producer = SyncQueue.from_queue(queue)
    try:
        plain = producer.enqueue("opt.sync", {"to": "a"}, concurrency_key="tenant:a")
        many = producer.enqueue_many(
            "opt.sync", [{"to": "b"}, {"to": "c"}], priority=7, concurrency_key="tenant:b"
        )
        first = producer.enqueue("opt.sync", {"to": "d"}, idempotency_key="d", unique_for=60)
        again = producer.enqueue("opt.sync", {"to": "d"}, idempotency_key="d")
        with pytest.raises(DuplicateJob) as raised:
            producer.enqueue("opt.sync", {"to": "d"}, idempotency_key="d", on_conflict="raise")
        keyed_many = producer.enqueue_many(
            "opt.sync", [{"to": "e"}, {"to": "d"}], idempotency_keys=["e", "d"]
        )
        with pytest.raises(TypeError, match=r"enqueue\(\) got unknown option 'delayy'"):
            producer.enqueue("opt.sync", {"to": "x"}, **{"delayy": 1})  # type: ignore[call-arg]
        with psycopg.connect(dsn) as conn, conn.transaction():
            inside = producer.enqueue("opt.sync", {"to": "f"}, connection=conn, delay=30)
    finally:
        producer.close()
    assert plain.queue == "mail" and plain.concurrency_key == "tenant:a"
    assert [job.priority for job in many] == [7, 7]
    assert again.id == first.id and raised.value.job.id == first.id
    assert keyed_many[1].id == first.id and keyed_many[0].id not in (first.id,)
    stored = {job.id: job for job in await queue.list_jobs(limit=100)}
    assert stored[plain.id].concurrency_key == "tenant:a"
    assert {stored[job.id].concurrency_key for job in many} == {"tenant:b"}
    assert stored[inside.id].run_at > stored[plain.id].run_at
