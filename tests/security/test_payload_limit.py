"""The database refuses payloads over its size limit on every path, SQL included, and
Python users get a PayloadTooLarge that names the limit and the fix."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import PayloadTooLarge, Queue

_BIG = "jsonb_build_object('s', repeat('x', 20000000))"  # 20 MB


@pytest.fixture
async def producer(queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[str]:
    role = f"aiopgq_producer_{uuid.uuid4().hex[:8]}"
    await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    await conn.execute(f'SELECT "{queue.schema}".grant_producer($1)', role)
    yield role
    await conn.execute(f'DROP OWNED BY "{role}"')
    await conn.execute(f'DROP ROLE "{role}"')


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO {s}.jobs (task, payload) VALUES ('t', " + _BIG + ")",
        "SELECT {s}.enqueue('t', " + _BIG + ")",
        "SELECT {s}.enqueue('t', " + _BIG + ", idempotency_key => 'k')",
        # compressed on its way in (from the producer's own table): measured decompressed
        "CREATE TEMP TABLE big AS SELECT " + _BIG + " AS p; "
        "INSERT INTO {s}.jobs (task, payload) SELECT 't', p FROM big",
    ],
    ids=["insert", "enqueue", "enqueue_key", "compressed"],
)
async def test_a_producer_cannot_store_20_mb_through_sql(
    dsn: str, queue: Queue, producer: str, statement: str
) -> None:
    conn = await asyncpg.connect(dsn, user=producer)
    try:
        with pytest.raises(asyncpg.CheckViolationError) as caught:
            await conn.execute(statement.format(s=f'"{queue.schema}"'))
    finally:
        await conn.close()
    assert caught.value.constraint_name == "jobs_payload_max_bytes"
    assert not await queue.pool.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs')


async def test_the_python_path_gets_a_clear_error(queue: Queue) -> None:
    await queue.pool.execute(f'SELECT "{queue.schema}".set_max_payload_bytes(4096)')
    assert await queue.pool.fetchval(f'SELECT "{queue.schema}".max_payload_bytes()') == 4096
    big = {"s": "x" * 10_000}  # under Queue's max_payload_bytes, over the database's
    for enqueue in (
        lambda: queue.enqueue("t", big),
        lambda: queue.enqueue("t", big, idempotency_key="k"),
        lambda: queue.enqueue_many("t", [{}, big]),
        lambda: queue.copy_many("t", [big]),
    ):
        with pytest.raises(PayloadTooLarge, match="set_max_payload_bytes") as caught:
            await enqueue()
        assert "max_payload_bytes()" in str(caught.value)
        assert isinstance(caught.value, ValueError)
    assert (await queue.enqueue("t", {"s": "x" * 1000})).id  # under the limit: fine


async def test_the_default_accepts_what_python_accepts_by_default(queue: Queue) -> None:
    # The densest jsonb per character of JSON text: one-digit numbers (12 bytes for "0,").
    dense = {"a": [0] * 499_990}
    job = await queue.enqueue("t", dense)
    stored = await queue.pool.fetchval(
        f"SELECT pg_column_size(payload || '{{}}') FROM \"{queue.schema}\".jobs WHERE id = $1",
        job.id,
    )
    assert stored > 5_000_000  # 6 bytes per character of its text, under the default
