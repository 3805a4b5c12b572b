"""Sequences (sequence_key=) through the public API: jobs of one key run one at a time in
enqueue order on several workers, unrelated keys side by side, a failed job holds its
sequence until it is retried or cancelled, and every enqueue path (Task, Queue,
enqueue_many, SyncQueue, SQL enqueue(), the CLI) joins a sequence the same way."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from aiopgq import Job, JobContext, JobFailed, JobStatus, Queue, Retry, SyncQueue, Worker

from ..support.cli import cli, run_cli
from ..support.helpers import eventually


@contextlib.asynccontextmanager
async def workers(queue: Queue, count: int = 2, concurrency: int = 5) -> AsyncIterator[None]:
    """`count` workers of the queue in this process, each with `concurrency` slots."""
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(count):
            worker: Worker = queue.worker(poll_interval=0.05, concurrency=concurrency)
            await stack.enter_async_context(worker)
        yield


class Ledger:
    """What the handlers saw: the order they started in, per key, and the most of one key
    that ever ran at once."""

    def __init__(self) -> None:
        self.order: dict[str, list[int]] = defaultdict(list)
        self.running: dict[str, int] = defaultdict(int)
        self.most: dict[str, int] = defaultdict(int)

    @contextlib.contextmanager
    def run(self, key: str, n: int) -> Any:
        self.order[key].append(n)
        self.running[key] += 1
        self.most[key] = max(self.most[key], self.running[key])
        try:
            yield
        finally:
            self.running[key] -= 1


async def status_of(queue: Queue, job: Job | int) -> JobStatus:
    return (await queue.get_job(job if isinstance(job, int) else job.id)).status


async def done(queue: Queue, *jobs: Job, within: float = 30.0) -> None:
    for job in jobs:
        await queue.wait_for_job(job.id, timeout=within)


async def test_jobs_of_one_key_run_one_at_a_time_in_enqueue_order(queue: Queue) -> None:
    ledger = Ledger()

    @queue.task(name="step")
    async def step(key: str, n: int) -> None:
        with ledger.run(key, n):
            await asyncio.sleep(0.005)

    jobs = [await step.enqueue(key="k", n=n, sequence_key="k") for n in range(40)]
    assert jobs[0].status is JobStatus.PENDING
    assert {job.status for job in jobs[1:]} == {JobStatus.WAITING}
    async with workers(queue, count=2, concurrency=5):
        await done(queue, *jobs)
    assert ledger.order["k"] == list(range(40))
    assert ledger.most["k"] == 1


async def test_unrelated_keys_run_side_by_side(queue: Queue) -> None:
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    @queue.task(name="step")
    async def step(key: str) -> None:
        started[key].set()
        other = started["b" if key == "a" else "a"]
        await asyncio.wait_for(other.wait(), 20)  # each runs only while the other does

    a = await queue.enqueue("step", {"key": "a"}, sequence_key="a")
    b = await queue.enqueue("step", {"key": "b"}, sequence_key="b")
    assert (a.status, b.status) == (JobStatus.PENDING, JobStatus.PENDING)
    async with workers(queue, count=1, concurrency=4):
        await done(queue, a, b)


async def test_a_failed_job_holds_its_sequence_until_it_is_retried_and_done(
    queue: Queue,
) -> None:
    ledger = Ledger()
    broken = {"on": True}

    @queue.task(name="step", max_attempts=1)
    async def step(n: int) -> None:
        with ledger.run("free" if n == 99 else "k", n):
            if n == 1 and broken["on"]:
                raise RuntimeError("broken")

    jobs = [await step.enqueue(n=n, sequence_key="k") for n in range(4)]
    after = await step.enqueue(n=99)  # no key: runs whatever the sequence does
    async with workers(queue):
        with pytest.raises(JobFailed):
            await queue.wait_for_job(jobs[1].id, timeout=30)
        await done(queue, after)
        await asyncio.sleep(0.5)  # a worker that would run a held job has had its chance
        assert [await status_of(queue, job) for job in jobs] == [
            JobStatus.DONE,
            JobStatus.FAILED,
            JobStatus.WAITING,
            JobStatus.WAITING,
        ]
        assert ledger.order["k"] == [0, 1]
        broken["on"] = False
        assert await queue.retry(jobs[1].id)
        await done(queue, *jobs)
    assert ledger.order["k"] == [0, 1, 1, 2, 3]
    assert ledger.most["k"] == 1


async def test_a_retry_with_attempts_left_keeps_the_sequence_waiting(queue: Queue) -> None:
    ledger = Ledger()

    @queue.task(name="step", max_attempts=3, retry=Retry(base=0.1, factor=1.0, cap=0.1))
    async def step(ctx: JobContext, n: int) -> None:
        with ledger.run("k", n):
            if n == 0 and ctx.attempt < 3:
                raise RuntimeError("not yet")

    jobs = [await step.enqueue(n=n, sequence_key="k") for n in range(3)]
    async with workers(queue):
        await done(queue, *jobs)
    assert ledger.order["k"] == [0, 0, 0, 1, 2]


async def test_cancelling_the_failed_job_lets_its_sequence_go_on(queue: Queue) -> None:
    ledger = Ledger()

    @queue.task(name="step", max_attempts=1)
    async def step(n: int) -> None:
        with ledger.run("k", n):
            if n == 0:
                raise RuntimeError("broken")

    jobs = [await step.enqueue(n=n, sequence_key="k") for n in range(3)]
    async with workers(queue):
        with pytest.raises(JobFailed):
            await queue.wait_for_job(jobs[0].id, timeout=30)
        assert await status_of(queue, jobs[1]) is JobStatus.WAITING
        assert await queue.cancel(jobs[0].id)
        await done(queue, jobs[1], jobs[2])
    assert await status_of(queue, jobs[0]) is JobStatus.CANCELLED
    assert ledger.order["k"] == [0, 1, 2]


async def test_a_cancelled_waiting_job_is_passed_over_and_the_order_kept(queue: Queue) -> None:
    ledger = Ledger()
    release = asyncio.Event()
    first_started = asyncio.Event()

    @queue.task(name="step")
    async def step(n: int) -> None:
        with ledger.run("k", n):
            if n == 0:
                first_started.set()
                await asyncio.wait_for(release.wait(), 20)

    jobs = [await step.enqueue(n=n, sequence_key="k") for n in range(4)]
    async with workers(queue):
        await asyncio.wait_for(first_started.wait(), 20)
        assert await queue.cancel(jobs[1].id)  # waiting behind the running job 0
        await asyncio.sleep(0.3)
        assert await status_of(queue, jobs[2]) is JobStatus.WAITING  # still behind job 0
        release.set()
        await done(queue, jobs[0], jobs[2], jobs[3])
    assert ledger.order["k"] == [0, 2, 3]
    assert ledger.most["k"] == 1
    # A job enqueued after a cancelled newest job waits on the live one before it.
    blocker = await step.enqueue(n=10, sequence_key="m", delay=3600)
    cancelled = await step.enqueue(n=11, sequence_key="m")
    assert await queue.cancel(cancelled.id)
    last = await step.enqueue(n=12, sequence_key="m")
    assert last.status is JobStatus.WAITING
    assert await queue.cancel(blocker.id)
    assert await status_of(queue, last) is JobStatus.PENDING


async def test_a_job_whose_predecessor_is_done_is_pending_at_once(queue: Queue) -> None:
    @queue.task(name="step")
    async def step(n: int) -> int:
        return n

    first = await step.enqueue(n=0, sequence_key="k")
    async with workers(queue, count=1):
        await done(queue, first)
    second = await step.enqueue(n=1, sequence_key="k")
    assert second.status is JobStatus.PENDING


async def test_enqueue_many_rows_join_the_sequence_in_row_order(queue: Queue) -> None:
    ledger = Ledger()

    @queue.task(name="step")
    async def step(n: int) -> None:
        with ledger.run("k", n):
            await asyncio.sleep(0.002)

    head = await step.enqueue(n=-1, sequence_key="k")
    jobs = await step.enqueue_many([{"n": n} for n in range(50)], sequence_key="k")
    assert {job.status for job in jobs} == {JobStatus.WAITING}
    more = await queue.enqueue_many("step", [{"n": n} for n in range(50, 60)], sequence_key="k")
    async with workers(queue, count=2, concurrency=10):
        await done(queue, head, *jobs, *more)
    assert ledger.order["k"] == list(range(-1, 60))
    assert ledger.most["k"] == 1


@pytest.mark.parametrize("while_running", [False, True], ids=["then-run", "while-running"])
async def test_concurrent_producers_of_one_key_run_one_at_a_time(
    queue: Queue, while_running: bool
) -> None:
    # while_running: the enqueues race the completions of the jobs they wait on.
    ledger = Ledger()
    runs: list[tuple[int, int]] = []

    @queue.task(name="step")
    async def step(producer: int, n: int) -> None:
        with ledger.run("k", n):
            runs.append((producer, n))
            await asyncio.sleep(0.001)

    async def produce(producer: int) -> list[Job]:
        return [await step.enqueue(producer=producer, n=n, sequence_key="k") for n in range(25)]

    async with contextlib.AsyncExitStack() as stack:
        if while_running:
            await stack.enter_async_context(workers(queue, count=2, concurrency=10))
        batches = await asyncio.gather(*(produce(p) for p in range(6)))
        jobs = [job for batch in batches for job in batch]
        if not while_running:
            heads = [job for job in jobs if job.status is JobStatus.PENDING]
            assert len(heads) == 1  # one chain: every other job waits on the one before it
            await stack.enter_async_context(workers(queue, count=2, concurrency=10))
        await done(queue, *jobs, within=60)
    assert ledger.most["k"] == 1
    assert len(runs) == 150
    for producer in range(6):  # each producer's jobs ran in the order it enqueued them
        assert [n for p, n in runs if p == producer] == list(range(25))


async def test_depends_on_and_a_sequence_on_one_job_both_hold(queue: Queue) -> None:
    ran: list[str] = []

    @queue.task(name="step", max_attempts=1)
    async def step(name: str) -> None:
        ran.append(name)
        if name == "a":
            raise RuntimeError("a fails")

    parent = await step.enqueue(name="parent", delay=3600)
    first = await step.enqueue(name="first", sequence_key="k", delay=3600)
    both = await step.enqueue(name="both", sequence_key="k", depends_on=parent)
    assert both.status is JobStatus.WAITING
    assert await queue.cancel(first.id)  # the sequence goes on; the parent still holds
    assert await status_of(queue, both) is JobStatus.WAITING
    assert await queue.cancel(parent.id)  # policy "cancel": the job is cancelled
    assert await status_of(queue, both) is JobStatus.CANCELLED
    # The predecessor named in depends_on too, with policy "run": its failure still holds.
    a = await step.enqueue(name="a", sequence_key="m")
    b = await step.enqueue(name="b", sequence_key="m", depends_on=a, on_parent_failure="run")
    async with workers(queue, count=1):
        with pytest.raises(JobFailed):
            await queue.wait_for_job(a.id, timeout=30)
        await asyncio.sleep(0.3)
        assert await status_of(queue, b) is JobStatus.WAITING
        assert await queue.cancel(a.id)
        await done(queue, b)
    assert ran == ["a", "b"]


async def test_sequence_key_is_refused_where_it_cannot_hold(queue: Queue) -> None:
    @queue.task(name="step")
    async def step(n: int) -> None:
        pass

    with pytest.raises(TypeError, match="sequence_key takes no idempotency key"):
        await step.enqueue(n=1, sequence_key="k", idempotency_key="x")
    with pytest.raises(TypeError, match="sequence_key takes no idempotency key"):
        await step.enqueue_many([{"n": 1}], sequence_key="k", idempotency_keys=["x"])
    with pytest.raises(TypeError, match=r"copy_many\(\) takes no sequence_key"):
        await step.copy_many([{"n": 1}], sequence_key="k")
    with pytest.raises(ValueError, match="sequence_key must be a non-empty string"):
        await step.enqueue(n=1, sequence_key="")
    async with queue.pool.acquire() as conn:
        with pytest.raises(asyncpg.InvalidParameterValueError, match="idempotency_key"):
            await conn.fetchval(
                f"SELECT \"{queue.schema}\".enqueue('step', '{{\"n\": 1}}', "
                "idempotency_key => 'x', sequence_key => 'k')"
            )


async def test_sql_enqueue_and_the_cli_join_the_sequence(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    ledger = Ledger()

    @queue.task(name="step")
    async def step(n: int) -> None:
        with ledger.run("k", n):
            pass

    first = await step.enqueue(n=0, sequence_key="k")
    second = await conn.fetchval(
        f"SELECT \"{queue.schema}\".enqueue('step', '{{\"n\": 1}}', sequence_key => 'k')"
    )
    assert await status_of(queue, second) is JobStatus.WAITING
    out = run_cli(
        dsn,
        queue.schema,
        "--schema",
        queue.schema,
        "enqueue",
        "step",
        '{"n": 2}',
        "--sequence-key",
        "k",
    )
    assert out.returncode == 0, out.stderr
    third = int(out.stdout.strip())
    assert await status_of(queue, third) is JobStatus.WAITING
    async with workers(queue):
        await queue.wait_for_job(third, timeout=30)
    assert ledger.order["k"] == [0, 1, 2]
    assert (await queue.get_job(first.id)).status is JobStatus.DONE


async def test_sync_queue_joins_the_sequence(dsn: str, queue: Queue) -> None:
    ledger = Ledger()

    @queue.task(name="step")
    async def step(n: int) -> None:
        with ledger.run("k", n):
            await asyncio.sleep(0.002)

    def produce() -> list[Job]:
        with SyncQueue(dsn, schema=queue.schema) as sync:
            one = sync.enqueue("step", {"n": 0}, sequence_key="k")
            many = sync.enqueue_many("step", [{"n": n} for n in range(1, 6)], sequence_key="k")
            return [one, *many]

    jobs = await asyncio.to_thread(produce)
    assert [job.status for job in jobs] == [JobStatus.PENDING] + [JobStatus.WAITING] * 5
    async with workers(queue):
        await done(queue, *jobs)
    assert ledger.order["k"] == list(range(6))


async def test_sequences_in_order_on_two_worker_processes_with_a_failure_holding(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    schema = f'"{queue.schema}"'
    await conn.execute(
        f"CREATE TABLE {schema}.ledger (job_id bigint, pid int, key text, n int, phase text, "
        "at timestamptz DEFAULT clock_timestamp(), seq bigserial)"
    )
    await conn.execute(f"CREATE TABLE {schema}.switch (name text)")
    await conn.execute(f"INSERT INTO {schema}.switch VALUES ('fail')")
    keys = [f"key-{k}" for k in range(4)]
    jobs: dict[str, list[Job]] = {}
    for key in keys:  # key-0's job 5 fails and holds the rest of key-0
        rows = [{"key": key, "n": n, "fail": key == "key-0" and n == 5} for n in range(20)]
        jobs[key] = await queue.enqueue_many("seq.step", rows, sequence_key=key, max_attempts=1)
    procs = [
        cli(
            dsn,
            queue.schema,
            "worker",
            "tests.support.sequence_app:queue",
            "--concurrency",
            "8",
            "--poll-interval",
            "0.2",
        )
        for _ in range(2)
    ]
    try:
        others = [job for key in keys[1:] for job in jobs[key]]
        await done(queue, *others, *jobs["key-0"][:5], within=120)
        failed = jobs["key-0"][5]

        async def has_failed() -> bool:
            return await status_of(queue, failed) is JobStatus.FAILED

        await eventually(has_failed, within=60)
        await asyncio.sleep(1.0)  # both processes poll several times meanwhile
        held = [await status_of(queue, job) for job in jobs["key-0"][6:]]
        assert set(held) == {JobStatus.WAITING}
        await conn.execute(f"DELETE FROM {schema}.switch")
        assert await queue.retry(failed.id)
        await done(queue, *jobs["key-0"], within=120)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    rows = await conn.fetch(f"SELECT key, n, pid, phase FROM {schema}.ledger ORDER BY seq")
    assert len({row["pid"] for row in rows}) == 2  # both processes ran steps
    for key in keys:
        phases = [(row["n"], row["phase"]) for row in rows if row["key"] == key]
        expected = [(n, phase) for n in range(20) for phase in ("start", "end")]
        if key == "key-0":  # the failed run of job 5, then its retry and the rest
            expected[10:10] = [(5, "start"), (5, "fail")]
        assert phases == expected, key  # start, end, start, end...: one at a time, in order


async def test_retention_keeps_a_failed_job_that_holds_and_drops_finished_keys(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="step", max_attempts=1)
    async def step(n: int) -> None:
        if n == 0:
            raise RuntimeError("broken")

    failed = await step.enqueue(n=0, sequence_key="held")
    held = await step.enqueue(n=1, sequence_key="held")
    other = await step.enqueue(n=2, sequence_key="other")
    worker = queue.worker(
        poll_interval=0.05, retention=0.1, failed_retention=0.1, maintenance_interval=0.2
    )
    async with worker:

        async def pruned() -> bool:
            return not await conn.fetchval(
                f'SELECT count(*) FROM "{queue.schema}".jobs WHERE id = $1', other.id
            )

        await eventually(pruned, within=30)
        await asyncio.sleep(0.5)  # a few more maintenance passes
    assert await status_of(queue, failed) is JobStatus.FAILED
    assert await status_of(queue, held) is JobStatus.WAITING
    keys = await conn.fetch(f'SELECT key FROM "{queue.schema}".sequences ORDER BY key')
    assert [row["key"] for row in keys] == ["held"]


@pytest.mark.parametrize("attempts", [2, 1])
async def test_a_job_whose_worker_died_keeps_its_sequence_waiting_or_holds_it(
    dsn: str, queue: Queue, conn: asyncpg.Connection, attempts: int
) -> None:
    # The rescue of an expired lease: with an attempt left the job goes back to pending
    # and its sequence keeps waiting; on its last attempt it ends failed and holds it.
    schema = f'"{queue.schema}"'
    await conn.execute(
        f"CREATE TABLE {schema}.ledger (job_id bigint, pid int, key text, n int, phase text, "
        "at timestamptz DEFAULT clock_timestamp(), seq bigserial)"
    )
    first = await queue.enqueue(
        "seq.crash", {"key": "k", "n": 0}, sequence_key="k", max_attempts=attempts
    )
    second = await queue.enqueue("seq.step", {"key": "k", "n": 1}, sequence_key="k")
    proc = cli(dsn, queue.schema, "worker", "tests.support.sequence_app:queue")
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 1 FROM {schema}.ledger"))
        proc.wait(20)  # it killed itself
    finally:
        proc.kill()
    rescuer = queue.worker(
        queues=["nothing"],
        visibility_timeout=1,
        heartbeat_interval=0.2,
        maintenance_interval=0.2,
        poll_interval=0.2,
    )
    expected = JobStatus.PENDING if attempts == 2 else JobStatus.FAILED
    async with rescuer:

        async def rescued() -> bool:
            return await status_of(queue, first) is expected

        await eventually(rescued)
    assert await status_of(queue, second) is JobStatus.WAITING
    proc = cli(dsn, queue.schema, "worker", "tests.support.sequence_app:queue")
    try:
        if attempts == 2:
            await done(queue, first, second)
            phases = await conn.fetch(f"SELECT n, phase FROM {schema}.ledger ORDER BY seq")
            assert [(r["n"], r["phase"]) for r in phases] == [
                (0, "start"),
                (0, "start"),
                (0, "end"),
                (1, "start"),
                (1, "end"),
            ]
        else:
            await asyncio.sleep(1.0)  # the new worker polls several times
            assert await status_of(queue, second) is JobStatus.WAITING
            assert await queue.cancel(first.id)
            await done(queue, second)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


async def test_random_cancels_while_workers_run_keep_every_key_in_order(queue: Queue) -> None:
    # Cancels of waiting and running jobs race the completions of the jobs before them:
    # every job that is not cancelled runs once, one at a time per key, in enqueue order.
    ledger = Ledger()
    ran: dict[str, list[int]] = defaultdict(list)

    @queue.task(name="step")
    async def step(key: str, n: int) -> None:
        ran[key].append(n)
        # A job cancelled while it runs lets the next one start before its handler hears
        # of the cancel: the jobs that are never cancelled are one at a time.
        with ledger.run(key if n not in victims[key] else f"victim-{key}", n):
            await asyncio.sleep(random.random() * 0.004)

    keys = [f"k{k}" for k in range(5)]
    rng = random.Random(7)
    victims = {key: set(rng.sample(range(1, 60), 15)) for key in keys}
    jobs = {
        key: await step.enqueue_many([{"key": key, "n": n} for n in range(60)], sequence_key=key)
        for key in keys
    }
    async with workers(queue, count=2, concurrency=5):
        for n in range(60):
            for key in keys:
                if n in victims[key]:
                    await queue.cancel(jobs[key][n].id)
            await asyncio.sleep(0.002)
        survivors = [
            job for key in keys for n, job in enumerate(jobs[key]) if n not in victims[key]
        ]
        await done(queue, *survivors, within=60)
    for key in keys:
        assert ledger.most[key] == 1, key
        order = ran[key]
        assert order == sorted(order) and len(set(order)) == len(order), key
        assert set(range(60)) - victims[key] <= set(order), key
