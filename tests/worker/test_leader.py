"""The maintenance leader: one at a time per schema, replaced within one interval when it dies.

Leadership is a transaction-scoped advisory lock taken at the start of each maintenance
batch (`pg_try_advisory_xact_lock`): nobody waits for it, and a dead leader's lock goes
with its transaction. The hard case is a leader killed mid-batch, holding the lock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import zlib
from datetime import timedelta

import asyncpg

from aiopgq import JobContext, JobStatus, Queue

from ..support.cli import cli
from ..support.helpers import eventually

INTERVAL = 1.0


def leader_key(schema: str) -> int:
    # The documented key: crc32("aiopgq-maintenance:<schema>"), 31 bits.
    return zlib.crc32(b"aiopgq-maintenance:" + schema.encode()) & 0x7FFFFFFF


async def leader_lock_holder(conn: asyncpg.Connection, schema: str) -> int | None:
    return await conn.fetchval(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid = 0 AND objid = $1 AND objsubid = 1",
        leader_key(schema),
    )


async def listening(conn: asyncpg.Connection, pid: int) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name LIKE $1",
            f"aiopgq-listener %:{pid}:%",
        )
    )


def worker_args() -> list[str]:
    return [
        "worker",
        "tests.support.app:queue",
        "--maintenance-interval",
        str(INTERVAL),
        "--heartbeat-interval",
        "0.2",
        "--visibility-timeout",
        "1",
    ]


async def test_leader_killed_mid_batch_is_replaced_within_one_interval(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    first = cli(dsn, queue.schema, *worker_args())
    second = None
    dsn_conn = await asyncpg.connect(dsn)
    try:
        await eventually(lambda: listening(conn, first.pid))
        # Hold the jobs table so that the leader's next batch blocks after taking the lock,
        # and add, in the same transaction, the job of a dead worker: it appears when the
        # table is released, so only a pass after the leader's death can rescue it.
        blocker = dsn_conn.transaction()
        await blocker.start()
        await dsn_conn.execute(f'LOCK TABLE "{queue.schema}".jobs IN EXCLUSIVE MODE')
        orphan = await queue.enqueue("app.noop", {"n": 1}, max_attempts=3, connection=dsn_conn)
        await dsn_conn.execute(
            f"UPDATE \"{queue.schema}\".jobs SET status = 'running', attempts = 1, "
            "locked_by = 'gone:1:dead', heartbeat_at = now() - interval '1 hour' WHERE id = $1",
            orphan.id,
        )
        leader_backend = await eventually(
            lambda: leader_lock_holder(conn, queue.schema), within=INTERVAL * 5
        )
        second = cli(dsn, queue.schema, *worker_args())
        await eventually(lambda: listening(conn, second.pid))
        await asyncio.sleep(INTERVAL * 1.5)  # the second worker's passes find the lock taken
        assert await leader_lock_holder(conn, queue.schema) == leader_backend

        os.kill(first.pid, signal.SIGKILL)  # the leader dies holding the lock, mid-batch
        first.wait(10)
        await blocker.commit()
        released = time.monotonic()

        async def rescued() -> bool:
            job = await queue.get_job(orphan.id)
            return job.status is not JobStatus.RUNNING

        await eventually(rescued, within=INTERVAL * 10, every=0.01)
        took = time.monotonic() - released

        async def done() -> bool:
            return (await queue.get_job(orphan.id)).status is JobStatus.DONE

        await eventually(done)  # run by the survivor and committed, before we kill it
        ran_by = await conn.fetchval(f"SELECT pid FROM {ledger}")
    finally:
        await dsn_conn.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert ran_by == second.pid
    # One interval for the survivor's next pass, plus margin for a loaded machine.
    assert took < INTERVAL + 2.0, f"the lost leader was replaced after {took:.2f} s"
    final = await queue.get_job(orphan.id)
    assert (final.status, final.attempts) == (JobStatus.DONE, 2)


async def test_a_pass_rescues_and_promotes_timers_in_one_transaction(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    """The first rescue batch rides the pass's housekeeping transaction (expired workers,
    events, timers): one commit where a pass made two, every interval."""

    @queue.task(name="leader.sleeper", queue="sleepers")
    async def sleeper(ctx: JobContext) -> None:
        await ctx.sleep(timedelta(minutes=30))

    slept = await sleeper.enqueue()
    await queue.worker(queues=["sleepers"]).run(burst=True)
    assert (await queue.get_job(slept.id)).status is JobStatus.WAITING  # with a timer
    orphan = await queue.enqueue("leader.sleeper", {}, queue="orphans")
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET status = 'running', attempts = 1, "
        "locked_by = 'gone:1:dead', heartbeat_at = now() - interval '1 hour' WHERE id = $1",
        orphan.id,
    )
    # A leader that passes every 20 minutes looks 40 ahead; it claims from neither queue.
    async with queue.worker(queues=["elsewhere"], maintenance_interval=1200):

        async def both_pending() -> bool:
            jobs = [await queue.get_job(job_id) for job_id in (slept.id, orphan.id)]
            return all(job.status is JobStatus.PENDING for job in jobs)

        await eventually(both_pending, within=20)
    xmins = await conn.fetch(
        f'SELECT xmin::text FROM "{queue.schema}".jobs WHERE id = ANY($1)', [slept.id, orphan.id]
    )
    assert len({row[0] for row in xmins}) == 1
