"""Bad input raises a clear, documented error and writes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

import asyncpg
import pytest

from aiopgq import ConfigurationError, Queue
from aiopgq._payload import decode_payload, encode_each_payload, encode_payload


@pytest.fixture
async def add(queue: Queue):  # type: ignore[no-untyped-def]
    @queue.task(name="demo.add")
    async def add(a: int, b: int) -> int:
        return a + b

    return add


async def count_jobs(queue: Queue, conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs'))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((1,), {}, TypeError, "missing a required argument: 'b'"),
        ((1, 2), {"c": 3}, TypeError, "unexpected keyword argument 'c'"),
        ((1,), {"b": uuid.uuid4()}, TypeError, "argument 'b' cannot be stored as JSON"),
        ((1,), {"b": float("nan")}, TypeError, "argument 'b' cannot be stored as JSON"),
        ((1,), {"b": "nul\x00byte"}, ValueError, "argument 'b' contains a NUL character"),
        ((1, 2), {"priority": 2**40}, ValueError, "priority must fit in 32 bits"),
        ((1, 2), {"delay": -5}, ValueError, "delay must be between 0 and 10 years"),
        ((1, 2), {"run_at": datetime(2030, 1, 1)}, ValueError, "naive datetime"),
        (
            (1, 2),
            {"run_at": datetime(2030, 1, 1).astimezone(), "delay": timedelta(1)},
            TypeError,
            "not both",
        ),
    ],
)
async def test_bad_enqueue_raises_and_writes_nothing(  # type: ignore[no-untyped-def]
    queue: Queue, conn: asyncpg.Connection, add, args, kwargs, error, match
) -> None:
    with pytest.raises(error, match=match):
        await add.enqueue(*args, **kwargs)
    assert await count_jobs(queue, conn) == 0


async def test_bad_enqueue_many_writes_nothing(queue: Queue, conn: asyncpg.Connection, add) -> None:  # type: ignore[no-untyped-def]
    for bulk in (add.enqueue_many, add.copy_many):
        with pytest.raises(TypeError, match="missing a required argument: 'b'"):
            await bulk([{"a": 1, "b": 2}, {"a": 1}])
        with pytest.raises(TypeError, match="argument 'b' cannot be stored as JSON"):
            await bulk([{"a": 1, "b": 2}, {"a": 1, "b": object()}])
        with pytest.raises(ValueError, match="argument 'a' contains a NUL character"):
            await bulk([{"a": "x\x00", "b": 2}])
    # A literal backslash-u-0000 text is not a NUL character.
    await add.enqueue_many([{"a": "\\u0000", "b": 2}])
    assert await count_jobs(queue, conn) == 1


async def test_enqueue_by_name_checks_registered_signature(
    queue: Queue,
    conn: asyncpg.Connection,
    add,  # type: ignore[no-untyped-def]
) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        await queue.enqueue("demo.add", {"a": 1, "b": 2, "z": 3})
    assert await count_jobs(queue, conn) == 0


async def test_payload_size_limit(dsn: str, queue: Queue, conn: asyncpg.Connection) -> None:
    small = Queue(dsn, schema=queue.schema, max_payload_bytes=100)
    async with small:
        with pytest.raises(ValueError, match="over the 100-byte limit"):
            await small.enqueue("t", {"blob": "x" * 200})
    assert await count_jobs(queue, conn) == 0


def test_schema_name_carrying_sql_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        Queue("postgresql://localhost/x", schema='x"; drop table jobs; --')


def test_unparsable_dsn_is_rejected_without_the_password() -> None:
    with pytest.raises(ConfigurationError, match="postgresql://") as info:
        Queue("mysql://user:s3cret@host/db")
    assert "s3cret" not in str(info.value)


def test_task_parameters_that_clash_with_enqueue_options(queue: Queue) -> None:
    with pytest.raises(TypeError, match="clashes with the enqueue option"):

        @queue.task(name="bad.sig")
        async def bad(delay: int) -> None:
            pass


async def test_queue_name_with_sql_is_just_data(queue: Queue, conn: asyncpg.Connection) -> None:
    nasty = 'x"; drop table jobs; --'
    job = await queue.enqueue("t", {}, queue=nasty)
    assert (await queue.get_job(job.id)).queue == nasty
    assert await count_jobs(queue, conn) == 1


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',
        '{"s": "\\u00e9\\n", "n": [1.5, -2e300, 123456789012345678901234567890]}',
        " {} ",
        "[1]",
    ],
)
def test_the_workers_payload_decoder_agrees_with_json_loads(text: str) -> None:
    assert decode_payload(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", "{", '{"a": 1} x', "nul", '{"a": 1}{}'])
def test_the_workers_payload_decoder_raises_what_json_loads_raises(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        decode_payload(text)
    with pytest.raises(ValueError) as expected:
        json.loads(text)
    assert str(raised.value) == str(expected.value)


def test_copy_many_encodes_each_payload_as_enqueue_does() -> None:
    payloads = [
        {"a": 1},
        {"s": ',"\\u0000",', "t": '"\\x00"'},  # the separator's text, escaped: still data
        {"b": ["x\\u0000", {"c": None}]},
        {"u": "é\n\t"},
    ]
    assert encode_each_payload(payloads, "t", 1000) == [
        encode_payload(p, "t", 1000) for p in payloads
    ]


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"n": "a\x00b"}, ValueError, "argument 'n' contains a NUL character"),
        ({"n": {1, 2}}, TypeError, "argument 'n' cannot be stored as JSON"),
        ({"n": "x" * 100}, ValueError, "over the 60-byte limit"),
    ],
)
def test_copy_many_rejects_a_bad_payload_by_name(
    bad: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        encode_each_payload([{"n": 1}, bad, {"n": 2}], "t", 60)
