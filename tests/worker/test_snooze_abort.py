"""Snooze (back later, attempt not counted, bounded) and Abort (failed at once)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg
import pytest

from aiopgq import Abort, JobContext, JobFailed, JobStatus, Queue, Snooze


async def test_snooze_puts_the_job_back_without_counting_an_attempt(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    attempts: list[int] = []

    @queue.task(name="s.later", max_attempts=1)  # one attempt: a counted snooze would fail it
    async def later() -> str:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise Snooze(0)
        return "ran"

    job = await later.enqueue()
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == "ran"
    assert done.attempts == 1 and len(attempts) == 3
    assert [(e.event, e.seconds, e.attempt, e.over_limit) for e in done.history] == [
        ("snooze", 0.0, 1, False),
        ("snooze", 0.0, 1, False),
    ]
    assert done.last_error is None
    assert (
        await conn.fetchval(
            f"SELECT metadata->'snoozes' FROM \"{queue.schema}\".jobs WHERE id = $1", job.id
        )
        == "2"
    )


async def test_a_snoozed_job_waits_its_seconds(queue: Queue) -> None:
    @queue.task(name="s.hour")
    async def hour() -> None:
        raise Snooze(3600)

    job = await hour.enqueue()
    before = datetime.now(timezone.utc)
    await queue.worker().run(burst=True)  # returns: the job is not runnable for an hour
    snoozed = await queue.get_job(job.id)
    assert snoozed.status is JobStatus.PENDING and snoozed.attempts == 0
    assert snoozed.run_at - before > timedelta(minutes=59)
    [event] = snoozed.history
    assert event.event == "snooze" and event.seconds == 3600 and event.worker is not None


async def test_snoozes_are_bounded_by_max_snoozes(queue: Queue) -> None:
    runs: list[int] = []

    @queue.task(name="s.forever", max_attempts=2, max_snoozes=2)
    async def forever(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        raise Snooze(0)

    job = await forever.enqueue()
    await queue.worker().run(burst=True)
    final = await queue.get_job(job.id)
    # Two free snoozes, then each snooze counts as a failed attempt: 2 more runs.
    assert runs == [1, 1, 1, 2]
    assert final.status is JobStatus.FAILED and final.attempts == 2
    assert final.last_error is not None and "max_snoozes (2)" in final.last_error
    assert [e.over_limit for e in final.history] == [False, False, True, True]
    with pytest.raises(JobFailed, match="max_snoozes"):
        await final.wait(timeout=10)


async def test_abort_fails_at_once_without_retries(queue: Queue) -> None:
    runs: list[int] = []

    @queue.task(name="s.abort", max_attempts=5)
    async def abort(order: int) -> None:
        runs.append(order)
        raise Abort(f"order {order} was cancelled")

    job = await abort.enqueue(7)
    await queue.worker().run(burst=True)
    failed = await queue.get_job(job.id)
    assert runs == [7]
    assert failed.status is JobStatus.FAILED and failed.attempts == 1
    assert failed.last_error is not None and "order 7 was cancelled" in failed.last_error
    [event] = failed.history
    assert (event.event, event.reason, event.attempt) == ("abort", "order 7 was cancelled", 1)
    with pytest.raises(JobFailed) as caught:
        await queue.result(job.id, timeout=10)
    assert caught.value.error == "aiopgq.Abort: order 7 was cancelled"


def test_bad_snooze_and_max_snoozes_are_refused(queue: Queue) -> None:
    with pytest.raises(ValueError, match="between 0 and 10 years"):
        Snooze(-1)
    with pytest.raises(TypeError, match="a number of seconds"):
        Snooze("5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_snoozes must be an int >= 0"):

        @queue.task(name="s.bad", max_snoozes=-1)
        async def bad() -> None: ...
