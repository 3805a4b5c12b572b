"""Key limits declared by tasks (`@queue.task(key_concurrency=K)`): they limit their
queue's keys for the workers that serve them, and a limit set with configure() wins.

Handlers record when they ran (start and end, this host's clock) in a spans table; a
handler runs inside its job's time as `running` in the database, so if the database
never has more running jobs of a key than the limit, the spans never overlap more.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import asyncpg
import pytest

from aiopgq import ConfigurationError, Queue, QueueSettings, current_job

from ..support.spans import peak_overlap, violations
from .test_fleet_limits import ROOT, wait_all_done


@pytest.fixture
async def spans(queue: Queue, conn: asyncpg.Connection) -> str:
    table = f'"{queue.schema}".spans'
    await conn.execute(
        f"CREATE TABLE {table} (job_id bigint, pid int, key text, started float8, ended float8)"
    )
    return table


def span_task(
    queue: Queue, table: str, name: str, key_concurrency: int | None, queue_name: str = "default"
) -> None:
    """Register task `name`, which sleeps `ms` and records its run in `table`."""

    @queue.task(name=name, queue=queue_name, key_concurrency=key_concurrency)
    async def run(ms: float, key: str = "") -> None:
        started = time.time()
        await asyncio.sleep(ms / 1000)
        ended = time.time()
        async with queue.pool.acquire() as conn:
            await conn.execute(
                f"INSERT INTO {table} (job_id, pid, key, started, ended) "
                "VALUES ($1, $2, $3, $4, $5)",
                current_job().id,
                os.getpid(),
                key,
                started,
                ended,
            )


async def by_key(conn: asyncpg.Connection, table: str) -> dict[str, list[tuple[float, float]]]:
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in await conn.fetch(f"SELECT key, started, ended FROM {table}"):
        runs[row["key"]].append((row["started"], row["ended"]))
    return runs


async def key_index_exists(conn: asyncpg.Connection, schema: str) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 "
            "AND indexname = 'jobs_pending_key_idx'",
            schema,
        )
    )


def test_a_task_key_limit_is_an_int_of_at_least_one_or_none(queue: Queue) -> None:
    for bad in (0, -1, 2.5, True, "2", 2**31):
        with pytest.raises(ConfigurationError, match="key_concurrency of task t"):

            @queue.task(name="t", key_concurrency=bad)  # type: ignore[arg-type]
            async def t() -> None: ...

    @queue.task(name="t", key_concurrency=3)
    async def limited() -> None: ...

    @queue.task(name="u")
    async def unlimited() -> None: ...

    assert (limited.key_concurrency, unlimited.key_concurrency) == (3, None)


async def test_a_declared_key_limit_holds_per_key_and_keys_run_side_by_side(
    queue: Queue, conn: asyncpg.Connection, spans: str
) -> None:
    span_task(queue, spans, "slow", key_concurrency=2)
    span_task(queue, spans, "slower", key_concurrency=4)  # the smallest one applies
    assert not await key_index_exists(conn, queue.schema)
    for key in "abcdef":
        await queue.enqueue_many("slow", [{"ms": 10, "key": key}] * 30, concurrency_key=key)
        await queue.enqueue_many("slower", [{"ms": 20, "key": key}] * 10, concurrency_key=key)
    workers = [queue.worker(concurrency=20, poll_interval=0.1) for _ in range(2)]
    await asyncio.gather(*(w.run(burst=True) for w in workers))
    runs = await by_key(conn, spans)
    assert {key: len(r) for key, r in runs.items()} == dict.fromkeys("abcdef", 40)
    assert {key: violations(r, 2) for key, r in runs.items()} == dict.fromkeys("abcdef", 0)
    assert {key: peak_overlap(r) for key, r in runs.items()} == dict.fromkeys("abcdef", 2)
    assert peak_overlap(s for r in runs.values() for s in r) > 6  # keys side by side
    # The worker (the tables' owner here) made what the key claim needs; the queue's
    # settings stay as configured: none.
    assert await key_index_exists(conn, queue.schema)
    assert await queue.queue_settings("default") == QueueSettings("default")
    cursor = await conn.fetchval(
        f"SELECT key_cursor FROM \"{queue.schema}\".queues WHERE queue = 'default'"
    )
    assert cursor in set("abcdef")


async def test_keys_take_turns_across_claims_with_many_keys(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # 200 small keys of 5 jobs and one big key first in key order; a claim visits at
    # most its batch + 16 keys, so only the key cursor kept in the queue's row lets
    # every key have its turn before the big key has its next: the big key runs about
    # once per round of 201 keys while the small keys finish.
    done: dict[str, int] = defaultdict(int)
    small_done = asyncio.Event()

    @queue.task(name="tenant", key_concurrency=1)
    async def tenant(key: str) -> None:
        done[key] += 1
        if sum(n for k, n in done.items() if k != "a-big") == 1000:
            small_done.set()

    await queue.copy_many("tenant", [{"key": "a-big"}] * 2000, concurrency_key="a-big")
    for i in range(200):
        key = f"small{i:03}"
        await queue.enqueue_many("tenant", [{"key": key}] * 5, concurrency_key=key)
    async with queue.worker(concurrency=10):
        await asyncio.wait_for(small_done.wait(), 120)
    assert done["a-big"] <= 30, done["a-big"]  # without turns, about one per claim: 100+


async def test_a_configured_key_limit_wins_over_the_declared_one_until_removed(
    queue: Queue, conn: asyncpg.Connection, spans: str
) -> None:
    span_task(queue, spans, "slow", key_concurrency=3)
    await queue.configure("default", key_concurrency=1)
    for key in "ab":
        await queue.enqueue_many("slow", [{"ms": 20, "key": key}] * 20, concurrency_key=key)
    await queue.worker(concurrency=10, poll_interval=0.1).run(burst=True)
    runs = await by_key(conn, spans)
    assert {key: peak_overlap(r) for key, r in runs.items()} == {"a": 1, "b": 1}
    await conn.execute(f"TRUNCATE {spans}")
    await queue.configure("default", key_concurrency=None)  # the declaration again
    for key in "ab":
        await queue.enqueue_many("slow", [{"ms": 20, "key": key}] * 20, concurrency_key=key)
    await queue.worker(concurrency=10, poll_interval=0.1).run(burst=True)
    runs = await by_key(conn, spans)
    assert {key: peak_overlap(r) for key, r in runs.items()} == {"a": 3, "b": 3}


async def test_a_declared_key_limit_holds_under_a_queue_limit_split_in_lanes(
    queue: Queue, conn: asyncpg.Connection, spans: str
) -> None:
    # concurrency=16 alone would let claims take one of 4 lanes each; the declared key
    # limit makes every claim of the queue take them all, so per-key counts hold.
    span_task(queue, spans, "slow", key_concurrency=2)
    await queue.configure("default", concurrency=16)
    for key in "abcdefghij":
        await queue.enqueue_many("slow", [{"ms": 10, "key": key}] * 20, concurrency_key=key)
    workers = [queue.worker(concurrency=10, poll_interval=0.1) for _ in range(3)]
    await asyncio.gather(*(w.run(burst=True) for w in workers))
    runs = await by_key(conn, spans)
    assert sum(len(r) for r in runs.values()) == 200
    assert sum(violations(r, 2) for r in runs.values()) == 0
    assert violations([s for r in runs.values() for s in r], 16) == 0


async def test_workers_starting_together_build_the_key_index_without_deadlock(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # Two CREATE INDEX CONCURRENTLY at once wait on each other's transaction: one
    # session builds while the others wait holding none.
    ran: list[str] = []

    @queue.task(name="t", key_concurrency=1)
    async def t() -> None:
        ran.append("t")

    await queue.enqueue_many("t", [{}] * 20, concurrency_key="k")
    starting = [queue.worker(concurrency=2, poll_interval=0.1).run(burst=True) for _ in range(4)]
    await asyncio.gather(*starting, queue.configure("other", key_concurrency=2))
    assert len(ran) == 20
    assert await conn.fetchval(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname = 'jobs_pending_key_idx' AND c.relnamespace = $1::regnamespace",
        queue.schema,
    )


async def test_a_queue_without_declared_limits_keeps_the_plain_claim(
    queue: Queue, conn: asyncpg.Connection, spans: str
) -> None:
    # One worker, two queues: the declared limit is its queue's only; the other queue's
    # keys are not limited, and it gets no row and is not claimed as limited.
    span_task(queue, spans, "keyed", key_concurrency=1, queue_name="keyed")
    span_task(queue, spans, "plain", key_concurrency=None, queue_name="plain")
    await queue.enqueue_many("keyed", [{"ms": 20, "key": "keyed"}] * 10, concurrency_key="k")
    await queue.enqueue_many("plain", [{"ms": 20, "key": "plain"}] * 10, concurrency_key="k")
    worker = queue.worker(queues=["keyed", "plain"], concurrency=10, poll_interval=0.1)
    await worker.run(burst=True)
    runs = await by_key(conn, spans)
    assert peak_overlap(runs["keyed"]) == 1
    assert peak_overlap(runs["plain"]) > 1
    rows = await conn.fetch(f'SELECT queue FROM "{queue.schema}".queues')
    assert [row["queue"] for row in rows] == ["keyed"]


@pytest.fixture
async def worker_role(conn: asyncpg.Connection, queue: Queue) -> AsyncIterator[str]:
    role = f"aiopgq_worker_{uuid.uuid4().hex[:8]}"
    await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    await conn.execute(f'SELECT "{queue.schema}".grant_worker($1)', role)
    yield role
    await conn.execute(f'DROP OWNED BY "{role}"')
    await conn.execute(f'DROP ROLE "{role}"')


async def test_a_worker_role_that_cannot_build_the_index_warns_with_the_fix_and_limits(
    dsn: str,
    queue: Queue,
    conn: asyncpg.Connection,
    worker_role: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    as_worker = Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker_role})
    ran: list[tuple[float, float]] = []

    @as_worker.task(name="job", queue="keyed", key_concurrency=1)
    async def job() -> None:
        started = time.monotonic()
        await asyncio.sleep(0.01)
        ran.append((started, time.monotonic()))

    await queue.enqueue_many("job", [{}] * 10, queue="keyed", concurrency_key="tenant")
    with caplog.at_level(logging.WARNING, logger="aiopgq.worker"):
        await as_worker.worker(concurrency=5, poll_interval=0.1).run(burst=True)
    warnings = [r.getMessage() for r in caplog.records if "declare key limits" in r.getMessage()]
    assert len(warnings) == 1
    assert "jobs_pending_key_idx" in warnings[0] and "rows in" in warnings[0]
    assert "aiopgq queue keyed --key-concurrency 1" in warnings[0]
    assert len(ran) == 10 and peak_overlap(ran) == 1  # the limit holds all the same
    assert not await key_index_exists(conn, queue.schema)
    # What the warning says to run, as the owner, makes both; the worker is then quiet.
    await queue.configure("keyed", key_concurrency=1)
    assert await key_index_exists(conn, queue.schema)
    caplog.clear()
    await queue.enqueue("job", {}, queue="keyed", concurrency_key="tenant")
    with caplog.at_level(logging.WARNING, logger="aiopgq.worker"):
        await as_worker.worker(concurrency=5, poll_interval=0.1).run(burst=True)
    assert not [r for r in caplog.records if "declare key limits" in r.getMessage()]
    assert len(ran) == 11


@contextmanager
def declared_workers(dsn: str, schema: str, count: int, *args: str) -> Iterator[None]:
    """`count` processes of `aiopgq worker tests.support.declared_app:queue`."""
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_TEST_SCHEMA": schema}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "aiopgq", "worker", "tests.support.declared_app:queue"]
    procs = [
        subprocess.Popen([*command, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
async def test_a_declared_key_limit_holds_across_worker_processes(
    dsn: str, queue: Queue, conn: asyncpg.Connection, spans: str
) -> None:
    # Two processes of tests/support/declared_app.py (key_concurrency=2 on its task), 20
    # slots each: 20 keys x 12 jobs of 20-60 ms, room for 40 running, so both processes
    # run jobs at once; never more than 2 running per key.
    total, keys = 240, [f"k{i:02}" for i in range(20)]
    rng = random.Random(23)
    for key in keys:
        payloads = [{"ms": rng.choice((20, 40, 60)), "key": key} for _ in range(12)]
        await queue.enqueue_many("declared.span", payloads, queue="declared", concurrency_key=key)
    with declared_workers(dsn, queue.schema, 2, "--concurrency", "20"):
        await wait_all_done(conn, queue, total, within=120)
    runs = await by_key(conn, spans)
    assert {key: len(r) for key, r in runs.items()} == dict.fromkeys(keys, 12)
    assert sum(violations(r, 2) for r in runs.values()) == 0
    assert max(peak_overlap(r) for r in runs.values()) == 2
    assert peak_overlap(s for r in runs.values() for s in r) > 12  # keys side by side
    assert await conn.fetchval(f"SELECT count(DISTINCT pid) FROM {spans}") == 2
    assert await conn.fetchval(
        f"SELECT key_cursor FROM \"{queue.schema}\".queues WHERE queue = 'declared'"
    ) in set(keys)
