"""`aiopgq jobs` and `aiopgq job` on a job that succeeded on a retry: no stale error or
worker shown as its current one, its failed attempt kept and labelled as history."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from aiopgq import JobFailed, JobStatus, Queue, Retry

ROOT = Path(__file__).resolve().parents[2]


def run(queue: Queue, *args: str) -> str:
    env = {**os.environ, "AIOPGQ_DSN": queue.dsn or "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "aiopgq", "--schema", queue.schema, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_job_done_on_a_retry_shows_no_stale_error(queue: Queue) -> None:
    tries = 0

    @queue.task(name="c.flaky", retry=Retry(base=0, jitter=0))
    async def flaky() -> None:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise RuntimeError("first try breaks")

    @queue.task(name="c.broken", max_attempts=1)
    async def broken() -> None:
        raise RuntimeError("always breaks")

    job = await flaky.enqueue()
    failing = await broken.enqueue()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            worker = queue.worker()
            tg.start_soon(worker.run)
            assert (await job.wait()).status is JobStatus.DONE
            with pytest.raises(JobFailed):
                await failing.wait()
            worker.stop()

    listed = {line.split()[0]: line for line in run(queue, "jobs").splitlines()[1:]}
    assert "first try breaks" not in listed[str(job.id)]
    assert "RuntimeError: always breaks" in listed[str(failing.id)]  # a current error stays

    shown = run(queue, "job", str(job.id))
    fields = dict(line.split(None, 1) for line in shown.splitlines() if line[:1].isalpha())
    assert fields["worker:"] == "-"
    assert fields["errors:"] == "1, of earlier attempts (attempt 2 succeeded)"
    assert "--- attempt 1," in shown and "first try breaks" in shown  # kept, as history
    failed_shown = run(queue, "job", str(failing.id))
    assert "(its last failed attempt)" in failed_shown
