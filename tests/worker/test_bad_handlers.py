"""Handlers and environments that misbehave: clear errors, nothing lost, the worker goes on."""

from __future__ import annotations

import logging
import time

import pytest

from aiopgq import ConfigurationError, JobStatus, Queue


async def test_unstorable_result_fails_the_job_with_the_reason(queue: Queue) -> None:
    @queue.task(name="returns.set")
    async def returns_set() -> object:
        return {1, 2}

    @queue.task(name="after")
    async def after() -> str:
        return "ok"

    bad = await returns_set.enqueue()
    good = await after.enqueue()
    await queue.worker(concurrency=1).run(burst=True)
    failed = await queue.get_job(bad.id)
    assert failed.status is JobStatus.FAILED
    assert failed.attempts == 1  # not retried: the job ran, retrying would repeat it
    assert failed.last_error is not None and "cannot be stored as JSON" in failed.last_error
    assert (await queue.get_job(good.id)).result == "ok"


class CustomBase(BaseException):
    pass


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), CustomBase("odd")])
async def test_handler_raising_base_exceptions_does_not_stop_the_worker(
    queue: Queue, exc: BaseException
) -> None:
    @queue.task(name="raises.base", max_attempts=1)
    async def raises_base() -> None:
        raise exc

    @queue.task(name="fine")
    async def fine() -> None:
        pass

    bad = await raises_base.enqueue()
    good = await fine.enqueue()
    await queue.worker(concurrency=1).run(burst=True)
    failed = await queue.get_job(bad.id)
    assert failed.status is JobStatus.FAILED
    assert failed.last_error is not None and type(exc).__name__ in failed.last_error
    assert (await queue.get_job(good.id)).status is JobStatus.DONE


async def test_sync_handler_raising_systemexit_in_its_thread(queue: Queue) -> None:
    @queue.task(name="sync.exit", max_attempts=1)
    def sync_exit() -> None:
        raise SystemExit(1)

    job = await sync_exit.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED


async def test_blocking_handler_is_reported_by_task_name(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    @queue.task(name="blocks.the.loop")
    async def blocks() -> None:
        time.sleep(1.5)  # noqa: ASYNC251 - the mistake being detected

    job = await blocks.enqueue()
    with caplog.at_level(logging.WARNING, logger="aiopgq"):
        await queue.worker(blocked_loop_warning=0.5).run(burst=True)
    assert (await queue.get_job(job.id)).status is JobStatus.DONE
    messages = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert messages, caplog.text
    assert f"by job {job.id} (task blocks.the.loop)" in messages[0]


async def test_unreachable_database_is_retried_then_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = Queue("postgresql://postgres:pw@127.0.0.1:1/nowhere", schema="aiopgq")

    @queue.task(name="never")
    async def never() -> None:
        pass

    started = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigurationError) as info:
        await queue.worker(connect_timeout=1.5).run()
    assert time.monotonic() - started < 15
    assert "cannot connect to postgresql://postgres:***@127.0.0.1:1/nowhere" in str(info.value)
    assert "gave up after" in str(info.value)
    assert any("retrying in" in r.getMessage() for r in caplog.records)
    assert "pw@" not in caplog.text
