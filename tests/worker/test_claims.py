"""The claim that carries a busy worker's `done`s (sql/claim/dequeue_completing.sql)
never waits behind a lock someone else holds on one of those jobs' rows."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from aiopgq import Queue
from aiopgq._worker import awake as awake_role
from aiopgq._worker.claims import Claims

from ..support.helpers import eventually


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "limited"])
async def test_a_lock_on_a_finished_jobs_row_does_not_stop_the_claims(
    queue: Queue, conn: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch, limited: bool
) -> None:
    """A transaction that holds job a's row (an operator's `SELECT ... FOR UPDATE`, a
    cancel inside a long transaction, or a peer's claim in a deadlock) while a ends: the
    claim that carries a's `done` would wait for it, with the next job b claimed and
    not started. The claim goes again without the `done` (the completer writes it once
    the lock is gone), and b starts while the lock is still held. The same through the
    claim of a queue with a limit (sql/functions/claim_limited.sql)."""
    monkeypatch.setattr(awake_role, "BUSY_RATE", 0.0)  # busy: the dones ride every claim
    release_a = asyncio.Event()
    started: list[str] = []

    @queue.task(name="step")
    async def step(name: str) -> None:
        started.append(name)
        if name == "a":
            await release_a.wait()

    jobs = f'"{queue.schema}".jobs'
    if limited:
        await queue.configure("default", concurrency=10)
    # One slot: b is claimed by the claim that carries a's done. The completer's own
    # flushes 30 s apart: a's done goes with that claim, not before it.
    worker = queue.worker(concurrency=1, poll_interval=30, completion_interval=30)
    async with worker:
        a = await step.enqueue(name="a")
        await eventually(lambda: started == ["a"], within=10)
        lock = conn.transaction()
        await lock.start()
        try:
            await conn.execute(f"SELECT 1 FROM {jobs} WHERE id = $1 FOR UPDATE", a.id)
            b = await step.enqueue(name="b")
            release_a.set()
            await eventually(lambda: started == ["a", "b"], within=10)
            status = await conn.fetchval(f"SELECT status::text FROM {jobs} WHERE id = $1", a.id)
            assert status == "running"  # its done waits for the lock, in the completer
        finally:
            await lock.rollback()

        async def both_done() -> bool:
            rows = await conn.fetch(
                f"SELECT status::text FROM {jobs} WHERE id = ANY($1::bigint[])", [a.id, b.id]
            )
            return [r[0] for r in rows] == ["done", "done"]

        await eventually(both_done, within=20)


async def test_a_burst_waits_for_its_last_jobs_without_claiming_meanwhile(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst that found no more jobs while its last one still runs (or while that
    job's outcome waits for the completer) waits for the job to end or the outcome to be
    committed before it looks again. It claimed in a loop before: thousands of empty
    claims while a job ran for half a second, each a round trip and a transaction."""
    claims = 0
    claim = Claims.claim

    async def counted(self: Claims, *args: object, **kwargs: object) -> object:
        nonlocal claims
        claims += 1
        return await claim(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Claims, "claim", counted)

    @queue.task(name="slow")
    async def slow() -> None:
        await asyncio.sleep(0.5)

    job = await slow.enqueue()
    await queue.worker(concurrency=4, poll_interval=30).run(burst=True)
    assert (await queue.get_job(job.id)).status.value == "done"
    # The claim that found the job, one after it (nothing more), one after it ended,
    # one after its outcome was committed: a few, whatever the machine's speed.
    assert claims <= 10


async def test_a_burst_writes_its_last_outcomes_without_waiting_for_the_interval(
    queue: Queue,
) -> None:
    """Once a burst finds nothing more to run, no claim will carry its last `done`s: the
    completer writes them at once, not after its interval (30 s here)."""

    @queue.task(name="quick")
    async def quick() -> None:
        return None

    job = await quick.enqueue()
    started = time.monotonic()
    await queue.worker(poll_interval=30, completion_interval=30).run(burst=True)
    assert time.monotonic() - started < 10
    assert (await queue.get_job(job.id)).status.value == "done"
