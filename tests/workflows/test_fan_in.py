"""A fan-in across worker processes: 1,000 parents completed concurrently by two workers
(`aiopgq worker`, as users run them) release their one child exactly once, after the
last of them."""

from __future__ import annotations

import signal
import subprocess

import asyncpg

from aiopgq import JobStatus, Queue

from ..support.cli import cli
from ..support.helpers import eventually


async def test_a_fan_in_of_1000_parents_on_two_processes_releases_its_child_once(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    ledger = f'"{queue.schema}".ledger'
    await conn.execute(
        f"CREATE TABLE {ledger} (job_id bigint, attempt int, pid int, task text, value int, "
        "at timestamptz DEFAULT clock_timestamp())"
    )
    parents = await queue.enqueue_many("wf.member", [{"n": n} for n in range(1000)])
    child = await queue.enqueue("wf.join", depends_on=parents)
    assert child.status is JobStatus.WAITING
    workers = [
        cli(
            dsn,
            queue.schema,
            "worker",
            "tests.support.workflow_app:queue",
            "--concurrency",
            "20",
            "--poll-interval",
            "0.2",
        )
        for _ in range(2)
    ]
    try:

        async def child_done() -> bool:
            return (await queue.get_job(child.id)).status is JobStatus.DONE

        await eventually(child_done, within=120, every=0.1)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    rows = await conn.fetch(f"SELECT task, pid, value, at FROM {ledger}")
    members = [row for row in rows if row["task"] == "wf.member"]
    joins = [row for row in rows if row["task"] == "wf.join"]
    assert sorted(row["value"] for row in members) == list(range(1000))
    assert len({row["pid"] for row in members}) == 2  # both processes completed parents
    assert len(joins) == 1 and joins[0]["value"] == 1000  # once, with every parent's result
    assert joins[0]["at"] > max(row["at"] for row in members)
    final = await queue.get_job(child.id)
    assert final.result == sum(range(1000)) and final.attempts == 1


async def test_a_parent_whose_worker_died_on_its_last_attempt_cancels_its_child(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    # The rescue of an expired lease ends the parent failed (its last attempt was lost):
    # the rescue's statement settles the child.
    ledger = f'"{queue.schema}".ledger'
    await conn.execute(
        f"CREATE TABLE {ledger} (job_id bigint, attempt int, pid int, task text, value int, "
        "at timestamptz DEFAULT clock_timestamp())"
    )
    parent = await queue.enqueue("wf.crash", max_attempts=1)
    child = await queue.enqueue("wf.join", depends_on=parent)
    proc = cli(dsn, queue.schema, "worker", "tests.support.workflow_app:queue")
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 1 FROM {ledger}"))
        proc.wait(20)  # it killed itself
    finally:
        proc.kill()
    assert (await queue.get_job(parent.id)).status is JobStatus.RUNNING
    rescuer = queue.worker(
        queues=["nothing"],
        visibility_timeout=1,
        heartbeat_interval=0.2,
        maintenance_interval=0.2,
        poll_interval=0.2,
    )
    async with rescuer:

        async def cancelled() -> bool:
            return (await queue.get_job(child.id)).status is JobStatus.CANCELLED

        await eventually(cancelled)
    assert (await queue.get_job(parent.id)).status is JobStatus.FAILED
    assert (await queue.get_job(child.id)).last_error == (
        f"cancelled: parent job {parent.id} ended failed"
    )
