"""The API at its edges: a queue not open yet, an unreachable server, a missing job id,
and bulk enqueues that name the item at fault."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from aiopgq import ConfigurationError, Error, JobNotFound, JobStatus, Queue, QueueNotOpen


def unused_port() -> int:
    """A local port nothing listens on (bound and released: free for a moment)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def calls_needing_a_pool(queue: Queue) -> dict[str, Callable[[], Awaitable[Any]]]:
    add = queue.tasks["demo.add"]
    return {
        "enqueue": lambda: queue.enqueue("demo.add", {"a": 1, "b": 2}),
        "task.enqueue": lambda: add.enqueue(1, b=2),
        "enqueue_many": lambda: queue.enqueue_many("demo.add", [{"a": 1, "b": 2}]),
        "enqueue_many([])": lambda: queue.enqueue_many("demo.add", []),
        "copy_many": lambda: queue.copy_many("demo.add", [{"a": 1, "b": 2}]),
        "copy_many([])": lambda: add.copy_many([]),
        "get_job": lambda: queue.get_job(1),
        "cancel": lambda: queue.cancel(1),
        "status": lambda: queue.status(),
        "set_notify": lambda: queue.set_notify("default", False),
        "blocked_sessions": lambda: queue.blocked_sessions(),
        "check_schema": lambda: queue.check_schema(),
    }


async def test_a_queue_not_open_says_how_to_open_it(dsn: str, schema: str) -> None:
    queue = Queue(dsn, schema=schema)

    @queue.task(name="demo.add")
    async def add(a: int, b: int) -> int:
        return a + b

    async def check_every_call() -> None:
        for name, call in calls_needing_a_pool(queue).items():
            with pytest.raises(QueueNotOpen) as info:
                await call()
            message = str(info.value)
            assert "`async with queue:`" in message and "`await queue.open()`" in message, name
            assert isinstance(info.value, Error) and isinstance(info.value, RuntimeError)
        with pytest.raises(QueueNotOpen):
            queue.pool  # noqa: B018

    await check_every_call()  # before open
    # migrate needs no open queue (it uses a connection of its own) and leaves it closed
    assert await queue.migrate() != []
    assert not queue.is_open
    await check_every_call()
    # a worker opens a closed queue for its run and closes it after
    await queue.worker().run(burst=True)
    assert not queue.is_open
    async with queue:
        job = await add.enqueue(1, b=2)
    await check_every_call()  # after close
    # the caller's own connection needs no pool
    conn = await asyncpg.connect(dsn)
    try:
        other = await queue.enqueue("demo.add", {"a": 3, "b": 4}, connection=conn)
        assert await queue.enqueue_many("demo.add", [], connection=conn) == []
    finally:
        await conn.close()
    await queue.worker().run(burst=True)
    async with queue:
        assert (await queue.get_job(job.id)).result == 3
        assert (await queue.get_job(other.id)).result == 7


async def test_migrate_on_an_unreachable_server_is_one_clear_error() -> None:
    dsn = f"postgresql://app:s3cret@127.0.0.1:{unused_port()}/app"
    queue = Queue(dsn)
    with pytest.raises(ConfigurationError) as info:
        await queue.migrate()
    message = str(info.value)
    assert message.startswith(f"cannot connect to postgresql://app:***@127.0.0.1:{dsn[-9:-4]}")
    assert "check the DSN and that the server is running" in message
    assert "s3cret" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chain


async def test_migrate_into_a_missing_database_is_one_clear_error(dsn: str) -> None:
    missing = dsn.rsplit("/", 1)[0] + "/no_such_database_here"
    with pytest.raises(ConfigurationError, match=r"cannot connect to .*no_such_database_here"):
        await Queue(missing).migrate()


async def test_cancel_and_get_job_agree_on_a_missing_id(queue: Queue) -> None:
    @queue.task(name="demo.wait")
    async def wait() -> None:
        pass

    missing = 10**12
    for call in (queue.get_job, queue.cancel):
        with pytest.raises(JobNotFound, match=f"no job with id {missing} in schema"):
            await call(missing)
    pending = await wait.enqueue()
    done = await wait.enqueue()
    assert await queue.cancel(pending.id) is True  # cancelled by this call
    assert await queue.cancel(pending.id) is False  # already cancelled: left alone
    await queue.worker().run(burst=True)
    assert await queue.cancel(done.id) is False  # finished: left alone
    assert (await queue.get_job(done.id)).status is JobStatus.DONE
    assert (await queue.get_job(pending.id)).status is JobStatus.CANCELLED


@pytest.mark.parametrize("method", ["enqueue_many", "copy_many"])
async def test_bulk_errors_name_the_item(
    queue: Queue, conn: asyncpg.Connection, method: str
) -> None:
    @queue.task(name="demo.add")
    async def add(a: int, b: int) -> int:
        return a + b

    ok = {"a": 1, "b": 2}
    # (payloads, error, message with the task's name, or None: no JSON check fails)
    signature_cases = [
        ([ok, ok, ok, {"a": 1}], "item 3: task demo.add: missing a required argument: 'b'"),
        ([ok, {**ok, "c": 1}], "item 1: task demo.add: got an unexpected keyword argument 'c'"),
    ]
    json_cases: list[tuple[list[Any], type[Exception], str]] = [
        ([ok, ok, {"a": 1, "b": {1}}], TypeError, "item 2: task {}: argument 'b' cannot be"),
        ([{"a": "x\x00", "b": 2}], ValueError, "item 0: task {}: argument 'a' contains a NUL"),
        ([ok, 5], TypeError, "item 1: expected a dict of the task's arguments"),
    ]
    by_queue = getattr(queue, method)
    by_task = getattr(add, method)
    for payloads, message in signature_cases:
        for call in (by_queue("demo.add", payloads), by_task(payloads)):
            with pytest.raises(TypeError) as info:
                await call
            assert str(info.value) == message
    for payloads, error, message in json_cases:
        # by name too: a task this process does not know gets the JSON checks, by index
        for name, call in [
            ("demo.add", by_queue("demo.add", payloads)),
            ("demo.add", by_task(payloads)),
            ("other.task", by_queue("other.task", payloads)),
        ]:
            with pytest.raises(error) as info:
                await call
            assert str(info.value).startswith(message.format(name)), info.value
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 0
    # a generator's items are counted as they come
    with pytest.raises(TypeError, match=r"^item 2: task demo\.add: missing"):
        await by_queue("demo.add", (ok if i != 2 else {"a": 1} for i in range(5)))
    result = await by_task(dict(ok) for _ in range(3))
    assert (len(result) if isinstance(result, list) else result) == 3
