"""One claimed batch that mixes every kind of job: on CPython 3.11 most take the
dispatcher's plain lane (_worker/plain_lane.py: the handler's first step with no
coroutine of ours around it), the rest the general path; each ends as the docs say,
whichever lane ran it, and a handler sees the same Job either way."""

from __future__ import annotations

import asyncio
import pickle
import time

import asyncpg

from aiopgq import Job, JobStatus, Queue, current_job


async def test_a_mixed_batch_ends_each_job_as_documented(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    seen: dict[str, Job] = {}

    @queue.task(name="lane.at_once")
    async def at_once(n: int) -> None:
        seen[f"at_once {n}"] = current_job()
        assert current_job() is seen[f"at_once {n}"]  # made once, when first asked for

    @queue.task(name="lane.returns")
    async def returns(n: int) -> dict[str, int]:
        return {"n": n}

    @queue.task(name="lane.raises", max_attempts=1)
    async def raises() -> None:
        raise ValueError("bad input")

    @queue.task(name="lane.waits")
    async def waits(n: int) -> int:
        before = current_job()
        await asyncio.sleep(0.05)
        assert current_job() is before
        seen[f"waits {n}"] = before
        return n * 2

    @queue.task(name="lane.waits_then_raises", max_attempts=1)
    async def waits_then_raises() -> None:
        await asyncio.sleep(0.01)
        raise KeyError("after a wait")

    @queue.task(name="lane.unstorable", max_attempts=1)
    async def unstorable() -> object:
        return {1, 2}

    @queue.task(name="lane.kwargs")
    async def kwargs(**payload: int) -> int:
        return sum(payload.values())

    @queue.task(name="lane.sync")
    def sync(n: int) -> int:
        time.sleep(0.01)
        return n + 1

    @queue.task(name="lane.timeout", timeout=0.05, max_attempts=1)
    async def timeout() -> None:
        await asyncio.sleep(10)

    jobs = {
        "at_once": await at_once.enqueue(1),
        "returns": await returns.enqueue(2),
        "raises": await raises.enqueue(),
        "waits": await waits.enqueue(3),
        "waits_then_raises": await waits_then_raises.enqueue(),
        "unstorable": await unstorable.enqueue(),
        "kwargs": await kwargs.enqueue(a=1, b=2),
        "sync": await sync.enqueue(4),
        "timeout": await timeout.enqueue(),
        "bad payload": await at_once.enqueue(5),
        "unknown": await at_once.enqueue(6),
    }
    table = f'"{queue.schema}".jobs'
    await conn.execute(
        f"UPDATE {table} SET payload = '{{\"m\": 1}}' WHERE id = $1", jobs["bad payload"].id
    )
    await conn.execute(f"UPDATE {table} SET task = 'lane.nobody' WHERE id = $1", jobs["unknown"].id)
    await queue.worker(concurrency=20).run(burst=True)  # one claim takes them all

    ended = {name: await queue.get_job(job.id) for name, job in jobs.items()}
    assert {name: job.status for name, job in ended.items()} == {
        "at_once": JobStatus.DONE,
        "returns": JobStatus.DONE,
        "raises": JobStatus.FAILED,
        "waits": JobStatus.DONE,
        "waits_then_raises": JobStatus.FAILED,
        "unstorable": JobStatus.FAILED,
        "kwargs": JobStatus.DONE,
        "sync": JobStatus.DONE,
        "timeout": JobStatus.FAILED,
        "bad payload": JobStatus.FAILED,
        "unknown": JobStatus.FAILED,
    }
    assert ended["returns"].result == {"n": 2}
    assert ended["waits"].result == 6
    assert ended["kwargs"].result == 3
    assert ended["sync"].result == 5
    errors = {name: job.last_error or "" for name, job in ended.items()}
    assert "ValueError: bad input" in errors["raises"]
    assert "KeyError: 'after a wait'" in errors["waits_then_raises"]
    assert "cannot be stored as JSON" in errors["unstorable"]
    assert "timeout" in errors["timeout"]
    assert "payload does not match" in errors["bad payload"]
    assert "lane.nobody" in errors["unknown"]

    # What current_job() gave, in the first step and after a wait: the claimed row.
    for key, name in (("at_once 1", "at_once"), ("waits 3", "waits")):
        job, stored = seen[key], jobs[name]
        assert (job.id, job.task, job.queue) == (stored.id, stored.task, stored.queue)
        assert (job.status, job.attempts, job.max_attempts) == (
            JobStatus.RUNNING,
            1,
            stored.max_attempts,
        )
        assert job.run_at == stored.run_at and job.created_at == stored.created_at
        assert job.last_error is None and job.result is None and job.errors == ()
        assert pickle.loads(pickle.dumps(job)) == job
    assert seen["at_once 1"].payload == {"n": 1}
