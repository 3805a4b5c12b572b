"""Observers: the hooks a queue calls around enqueues, cancels and runs, and what it
costs when there are none."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import asyncpg
import pytest

from aiopgq import Job, JobStatus, Observer, Queue, Retry

from ..support.helpers import eventually

SQL = Path(__file__).resolve().parents[2] / "sql"


class Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def enqueue_started(self, task: str, queue: str, count: int) -> _Enqueue:
        self.events.append(("enqueue", task, queue, count))
        return _Enqueue(self.events)

    def cancelled(self, job_id: int, task: str, queue: str) -> None:
        self.events.append(("cancelled", job_id, task, queue))

    def job_started(self, job: Job, trace_context: Mapping[str, str] | None) -> _Run:
        self.events.append(("started", job.id, job.task, trace_context))
        return _Run(self.events, job.id)


class _Enqueue:
    trace_context = None

    def __init__(self, events: list[tuple[object, ...]]) -> None:
        self.events = events

    def ended(self, job_ids: Sequence[int] | None, error: BaseException | None) -> None:
        self.events.append(("enqueued", None if job_ids is None else list(job_ids), error))


class _Run:
    def __init__(self, events: list[tuple[object, ...]], job_id: int) -> None:
        self.events = events
        self.job_id = job_id

    def ended(self, outcome: str, error: str | None) -> None:
        self.events.append(("ended", self.job_id, outcome, error))


async def test_observer_hears_every_enqueue_cancel_and_outcome(dsn: str, schema: str) -> None:
    recorder = Recorder()
    queue = Queue(dsn, schema=schema, observers=[recorder])
    await queue.migrate()

    @queue.task(name="ok")
    async def ok() -> int:
        return 1

    @queue.task(name="flaky", max_attempts=2, retry=Retry(base=0, jitter=0))
    async def flaky() -> None:
        raise ValueError("no luck")

    @queue.task(name="slow")
    async def slow() -> None:
        await asyncio.sleep(30)

    async with queue:
        one = await ok.enqueue()
        many = await ok.enqueue_many([{}, {}])
        assert await ok.copy_many([{}]) == 1
        bad = await flaky.enqueue()
        gone = await ok.enqueue(delay=60)
        assert await queue.cancel(gone.id)
        await queue.worker(queues=["default"], concurrency=5).run(burst=True)
        stuck = await slow.enqueue()
        worker = queue.worker(concurrency=1, grace_period=0)
        async with worker:
            await eventually(lambda: worker.running_jobs == 1)
    events = recorder.events
    assert ("enqueue", "ok", "default", 1) in events
    assert ("enqueued", [one.id], None) in events
    assert ("enqueue", "ok", "default", 2) in events
    assert ("enqueued", [j.id for j in many], None) in events
    assert ("enqueued", None, None) in events  # copy_many: a count, no ids
    assert ("cancelled", gone.id, "ok", "default") in events
    ended = {(e[1], e[2]) for e in events if e[0] == "ended"}
    assert {(one.id, "succeeded"), (many[0].id, "succeeded")} <= ended
    assert (bad.id, "retried") in ended and (bad.id, "failed") in ended
    assert (stuck.id, "released") in ended  # the worker stopped with it running
    errors = [e[3] for e in events if e[0] == "ended" and e[1] == bad.id]
    assert all("ValueError: no luck" in (error or "") for error in errors)
    starts = [e for e in events if e[0] == "started"]
    assert all(e[3] is None for e in starts)  # no tracing: no trace context read


async def test_an_observer_that_raises_costs_no_job(dsn: str, schema: str) -> None:
    class Broken(Observer):
        def enqueue_started(self, task: str, queue: str, count: int) -> None:
            raise RuntimeError("observer bug")

        def job_started(self, job: Job, trace_context: Mapping[str, str] | None) -> _Explodes:
            return _Explodes()

    class _Explodes:
        def ended(self, outcome: str, error: str | None) -> None:
            raise RuntimeError("observer bug at the end")

    class BrokenStart(Observer):
        def job_started(self, job: Job, trace_context: Mapping[str, str] | None) -> None:
            raise RuntimeError("observer bug at the start")

    for observer in (Broken(), BrokenStart()):
        queue = Queue(dsn, schema=schema, observers=[observer])
        await queue.migrate()

        @queue.task(name="ok")
        async def ok() -> int:
            return 1

        async with queue:
            jobs = await ok.enqueue_many([{}] * 20)
            await queue.worker(concurrency=5).run(burst=True)
            for job in jobs:
                assert (await queue.get_job(job.id)).status is JobStatus.DONE


async def test_without_observers_nothing_reads_or_writes_the_trace_context(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    assert queue.observer is None

    @queue.task(name="ok")
    async def ok() -> None:
        pass

    await ok.enqueue()
    await ok.enqueue_many([{}, {}])
    await ok.copy_many([{}])
    await queue.worker().run(burst=True)
    rows = await conn.fetch(f'SELECT status::text, trace_context FROM "{queue.schema}".jobs')
    assert [(r["status"], r["trace_context"]) for r in rows] == [("done", None)] * 4
    # The claim without tracing is the statement the worker always ran.
    assert "trace_context" not in queue.sql.claim(several_queues=False, completing=True)


@pytest.mark.parametrize(
    ("plain", "traced"),
    [("insert_job", "insert_job_traced"), ("insert_jobs", "insert_jobs_traced")],
)
def test_traced_inserts_differ_from_the_plain_ones_only_by_the_trace_context(
    plain: str, traced: str
) -> None:
    def statement(name: str) -> str:
        text = (SQL / "enqueue" / f"{name}.sql").read_text()
        return " ".join(line for line in text.splitlines() if not line.startswith("--"))

    without_trace = re.sub(r", trace_context|, \$[78]::text::jsonb", "", statement(traced))
    assert without_trace == statement(plain)


def test_observers_are_checked() -> None:
    queue = Queue("postgresql://localhost/x")
    with pytest.raises(TypeError, match=r"aiopgq\.Observer"):
        queue.add_observer(object())  # type: ignore[arg-type]


async def test_one_raising_observer_does_not_silence_the_others(dsn: str, schema: str) -> None:
    class Raises(Observer):
        def enqueue_started(self, task: str, queue: str, count: int) -> None:
            raise RuntimeError("observer bug")

        def cancelled(self, job_id: int, task: str, queue: str) -> None:
            raise RuntimeError("observer bug")

        def job_started(self, job: Job, trace_context: Mapping[str, str] | None) -> None:
            raise RuntimeError("observer bug")

    recorder = Recorder()
    queue = Queue(dsn, schema=schema, observers=[Raises(), recorder])
    await queue.migrate()

    @queue.task(name="ok")
    async def ok() -> None:
        pass

    async with queue:
        job = await ok.enqueue()
        later = await ok.enqueue(delay=60)
        assert await queue.cancel(later.id)
        await queue.worker().run(burst=True)
    kinds = [event[0] for event in recorder.events]
    assert kinds.count("enqueued") == 2 and "cancelled" in kinds
    assert ("ended", job.id, "succeeded", None) in recorder.events
