"""A 10,000-member group run by three `aiopgq worker` processes under random SIGKILLs
(killed workers are restarted): its callback runs exactly once, after the last member,
with every member's result, and the group's counter ends at exactly zero."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys

import asyncpg
import pytest

from aiopgq import JobStatus, Queue

from ..support.cli import ROOT

MEMBERS = 10_000


def start_worker(dsn: str, schema: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_TEST_SCHEMA": schema, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiopgq",
            "worker",
            "tests.support.workflow_app:queue",
            "--concurrency",
            "20",
            "--poll-interval",
            "0.2",
            "--visibility-timeout",
            "2",
            "--heartbeat-interval",
            "0.5",
            "--maintenance-interval",
            "0.5",
            "--retention",
            "none",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
async def test_a_10000_member_group_releases_its_callback_once_under_sigkills(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    ledger = f'"{queue.schema}".ledger'
    await conn.execute(
        f"CREATE TABLE {ledger} (job_id bigint, attempt int, pid int, task text, value int, "
        "at timestamptz DEFAULT clock_timestamp())"
    )
    wf = queue.workflow("chaos")
    group = wf.add_many("wf.gmember", [{"n": n} for n in range(MEMBERS)], name="members")
    wf.add("wf.gcallback", depends_on=[group])
    wid = await wf.enqueue()
    rng = random.Random(26)
    workers = [start_worker(dsn, queue.schema) for _ in range(3)]
    kills = 0
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 600
        while loop.time() < deadline:
            summary = await queue.get_workflow(wid)
            if summary.status != "running":
                break
            left = summary.groups[0].remaining
            if left > 500:  # kill while members run; the callback runs undisturbed
                await asyncio.sleep(rng.uniform(0.3, 1.0))
                victim = rng.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait(10)
                kills += 1
                workers[victim] = start_worker(dsn, queue.schema)
            else:
                await asyncio.sleep(0.2)
        else:
            pytest.fail(f"the workflow did not finish in 600 s: {summary.counts}")
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert kills >= 3
    done = await queue.get_workflow(wid)
    assert done.status == "done", done.counts
    assert done.counts == {"done": MEMBERS + 1}
    (members,) = done.groups
    assert (members.remaining, members.failed) == (0, 0)
    rows = await conn.fetch(f"SELECT task, value, at FROM {ledger}")
    ran = [row for row in rows if row["task"] == "wf.gmember"]
    callbacks = [row for row in rows if row["task"] == "wf.gcallback"]
    assert {row["value"] for row in ran} == set(range(MEMBERS))  # some ran twice: killed
    assert len(callbacks) == 1 and callbacks[0]["value"] == MEMBERS
    assert callbacks[0]["at"] > max(row["at"] for row in ran)
    callback = next(job for job in done.jobs if job.task == "wf.gcallback")
    final = await queue.get_job(callback.id)
    assert final.status is JobStatus.DONE and final.result == sum(range(MEMBERS))
    assert final.attempts == 1
