"""Hostile JSON written through SQL by a producer role: payloads nested deeper than
Python's decoder follows or that do not match the task's arguments, a deep trace
context or checkpoint. Each job ends at once with an error naming what is wrong (never "worker
lost" after its lease), and the worker keeps serving the other jobs."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest
from opentelemetry.sdk.trace import TracerProvider

from aiopgq import JobContext, JobStatus, Queue
from aiopgq.tracing import Tracing

from ..support.helpers import eventually

DEEP = '{"x":' + "[" * 5000 + "]" * 5000 + "}"  # jsonb takes it; Python's decoder does not

# A lease far longer than the tests wait: a job that waited for it would time them out.
LONG_LEASE = {"visibility_timeout": 300.0, "heartbeat_interval": 5.0}


@pytest.fixture
async def producer(dsn: str, queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[str]:
    role = f"aiopgq_producer_{uuid.uuid4().hex[:8]}"
    await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    await conn.execute(f'SELECT "{queue.schema}".grant_producer($1)', role)
    try:
        yield role
    finally:
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


async def insert(dsn: str, role: str, schema: str, task: str, payload: str, **more: str) -> int:
    """INSERT a job as `role` would, bypassing every check of the Python client."""
    columns = ["task", "payload", *more]
    values = ["$1", "$2::jsonb", *(f"${i}::jsonb" for i in range(3, 3 + len(more)))]
    sql = (
        f'INSERT INTO "{schema}".jobs ({", ".join(columns)}) '
        f"VALUES ({', '.join(values)}) RETURNING id"
    )
    sender = await asyncpg.connect(dsn, user=role)
    try:
        job_id: int = await sender.fetchval(sql, task, payload, *more.values())
    finally:
        await sender.close()
    return job_id


@dataclass
class Row:
    status: JobStatus
    attempts: int
    result: object
    last_error: str | None


async def finished(queue: Queue, ids: list[int]) -> list[Row] | None:
    """The jobs' rows once all have finished. Read with SQL: Job objects decode the
    payload, which these tests make undecodable on purpose."""
    async with queue.pool.acquire() as conn:
        rows = await conn.fetch(
            f'SELECT status, attempts, result::text, last_error, finished_at FROM "{queue.schema}"'
            ".jobs j JOIN unnest($1::bigint[]) WITH ORDINALITY AS i(id, n) USING (id) ORDER BY n",
            ids,
        )
    if len(rows) != len(ids) or any(r["finished_at"] is None for r in rows):
        return None
    return [
        Row(
            JobStatus(r["status"]),
            r["attempts"],
            None if r["result"] is None else json.loads(r["result"]),
            r["last_error"],
        )
        for r in rows
    ]


async def test_undecodable_payloads_fail_at_once_and_the_worker_serves_the_rest(
    dsn: str, queue: Queue, producer: str
) -> None:
    ran: list[str] = []

    @queue.task(name="hostile.echo", max_attempts=5)
    async def echo(x: object) -> str:
        ran.append(repr(x)[:20])
        return "ok"

    async with queue.worker(**LONG_LEASE):
        bad = {
            "nested too deep": await insert(dsn, producer, queue.schema, "hostile.echo", DEEP),
            "unknown argument": await insert(
                dsn, producer, queue.schema, "hostile.echo", '{"y": 1}'
            ),
        }
        bad["missing argument"] = await insert(dsn, producer, queue.schema, "hostile.echo", "{}")
        for not_an_object in ("[1, 2]", '"text"', "42", "null"):  # the table refuses these
            with pytest.raises(asyncpg.CheckViolationError, match="payload_is_object"):
                await insert(dsn, producer, queue.schema, "hostile.echo", not_an_object)
        good = await echo.enqueue(x=1)
        jobs = await eventually(lambda: finished(queue, [*bad.values(), good.id]), within=30)
    *failed, done = jobs
    assert (done.status, done.result, done.attempts) == (JobStatus.DONE, "ok", 1)
    for what, job in zip(bad, failed, strict=True):
        assert (job.status, job.attempts) == (JobStatus.FAILED, 1), what
        assert job.last_error is not None and "its payload" in job.last_error, what
        assert "worker lost" not in job.last_error.lower(), what
    assert "deeper than Python's JSON decoder" in failed[0].last_error
    assert ran == ["1"]


async def test_a_deep_trace_context_is_ignored(dsn: str, schema: str, producer: str) -> None:
    # A worker that traces decodes each claimed job's trace_context.
    queue = Queue(dsn, schema=schema, observers=[Tracing(tracer_provider=TracerProvider())])
    ran: list[int] = []

    @queue.task(name="hostile.traced")
    async def traced(n: int) -> int:
        ran.append(n)
        return n

    async with queue, queue.worker(**LONG_LEASE):
        deep = await insert(dsn, producer, schema, "hostile.traced", '{"n": 1}', trace_context=DEEP)
        plain = await traced.enqueue(n=2)
        jobs = await eventually(lambda: finished(queue, [deep, plain.id]), within=30)
        assert [(j.status, j.result, j.attempts) for j in jobs] == [
            (JobStatus.DONE, 1, 1),
            (JobStatus.DONE, 2, 1),
        ]
        assert sorted(ran) == [1, 2]


async def test_a_deep_checkpoint_raises_value_error_in_the_handler(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    seen: list[str] = []

    @queue.task(name="hostile.resumable")
    async def resumable(ctx: JobContext) -> str:
        try:
            return repr(ctx.checkpoint)
        except ValueError as exc:  # the handler can start afresh
            seen.append(str(exc))
            return "fresh"

    job = await resumable.enqueue()
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET metadata = jsonb_build_object('checkpoint', "
        "$2::jsonb) WHERE id = $1",
        job.id,
        DEEP,
    )
    async with queue.worker(**LONG_LEASE):
        (final,) = await eventually(lambda: finished(queue, [job.id]), within=30)
    assert (final.status, final.result) == (JobStatus.DONE, "fresh")
    assert len(seen) == 1 and "checkpoint cannot be decoded" in seen[0]


async def test_an_internal_error_fails_the_attempt_instead_of_waiting_for_the_lease(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiopgq._worker import invoke, plain_lane

    def broken(text: str) -> object:  # a bug of aiopgq's in the dispatch of a job
        raise RuntimeError("dispatch bug")

    @queue.task(name="hostile.victim", max_attempts=1)
    async def victim() -> None:
        raise AssertionError("not reached")

    monkeypatch.setattr(invoke, "decode_payload", broken)
    monkeypatch.setattr(plain_lane, "scan_json", broken)  # its decoder: then invoke's
    async with queue.worker(**LONG_LEASE):
        job = await victim.enqueue()
        (final,) = await eventually(lambda: finished(queue, [job.id]), within=30)
    assert (final.status, final.attempts) == (JobStatus.FAILED, 1)
    assert final.last_error is not None
    assert "internal error" in final.last_error and "dispatch bug" in final.last_error
