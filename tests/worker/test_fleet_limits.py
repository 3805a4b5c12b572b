"""Limits across worker processes started through the CLI (tests/support/app.py's tasks).

Each handler records when it ran (start and end, this host's clock) in a spans table;
a handler runs inside its job's time as `running` in the database, so if the
database never has more running jobs than a limit, the spans never overlap more.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import asyncpg
import pytest

from aiopgq import JobStatus, Queue, QueueSettings

from ..support.helpers import eventually
from ..support.spans import peak_overlap, violations

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def workers(dsn: str, schema: str, count: int, *args: str) -> Iterator[list[subprocess.Popen[str]]]:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_TEST_SCHEMA": schema, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "aiopgq", "worker", "tests.support.app:queue", *args]
    procs = [
        subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


@asynccontextmanager
async def spans_table(queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[str]:
    table = f'"{queue.schema}".spans'
    await conn.execute(
        f"CREATE TABLE {table} (job_id bigint, pid int, key text, started float8, ended float8)"
    )
    yield table


async def wait_all_done(conn: asyncpg.Connection, queue: Queue, total: int, within: float) -> None:
    async def done() -> bool:
        finished = await conn.fetchval(
            f"SELECT count(*) FROM \"{queue.schema}\".jobs WHERE status = 'done'"
        )
        return bool(finished == total)

    await eventually(done, within=within, every=0.5)


@pytest.mark.slow
async def test_queue_and_key_limits_hold_across_four_processes(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    # 4 worker processes x 50 slots on a queue limited to 120 running jobs (more than
    # two processes' slots: three or four must run its jobs at once) and 3 per key:
    # 10,000 jobs of 60-240 ms over 50 keys. Not one instant with more. Jobs this long
    # need 800 claims/s to fill the limit, which a loaded 2-core machine keeps up with
    # (with 20-80 ms jobs a CI run under load peaked at 102).
    total, keys = 10_000, 50
    await queue.configure("limited", concurrency=120, key_concurrency=3)
    rng = random.Random(16)
    for k in range(keys):
        payloads = [
            {"ms": rng.choice((60, 150, 240)), "key": f"k{k}"} for _ in range(total // keys)
        ]
        await queue.enqueue_many("app.span", payloads, queue="limited", concurrency_key=f"k{k}")
    async with spans_table(queue, conn) as table:
        started = time.monotonic()
        with workers(dsn, queue.schema, 4, "--queues", "limited", "--concurrency", "50"):
            await wait_all_done(conn, queue, total, within=240)
        elapsed = time.monotonic() - started
        rows = await conn.fetch(f"SELECT pid, key, started, ended FROM {table}")
    assert len(rows) == total  # each job ran once
    assert len({row["pid"] for row in rows}) >= 3  # the limit was shared by processes
    spans = [(row["started"], row["ended"]) for row in rows]
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        by_key[row["key"]].append((row["started"], row["ended"]))
    assert violations(spans, 120) == 0
    assert sum(violations(runs, 3) for runs in by_key.values()) == 0
    # and the limit was used, not just respected: more than two processes' slots at once
    assert peak_overlap(spans) > 100
    print(f"\n{total} jobs in {elapsed:.1f} s, peak {peak_overlap(spans)} running")


@pytest.mark.slow
async def test_queue_limit_with_lanes_holds_across_four_processes(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    # A queue whose only limit is concurrency=150 (three processes' slots; jobs of 20-80
    # ms, so that it binds): claims hold
    # one of 4 lanes for at most 18 jobs while at most 78 run, and every lane past that.
    total = 12_000
    await queue.configure("limited", concurrency=150)
    rng = random.Random(64)
    payloads = [{"ms": rng.choice((20, 50, 80))} for _ in range(total)]
    await queue.enqueue_many("app.span", payloads, queue="limited")
    async with spans_table(queue, conn) as table:
        with workers(dsn, queue.schema, 4, "--queues", "limited", "--concurrency", "50"):
            await wait_all_done(conn, queue, total, within=240)
        rows = await conn.fetch(f"SELECT pid, started, ended FROM {table}")
    assert len(rows) == total
    assert len({row["pid"] for row in rows}) >= 3
    spans = [(row["started"], row["ended"]) for row in rows]
    assert violations(spans, 150) == 0
    assert peak_overlap(spans) > 78  # past the lanes' range


@pytest.mark.slow
async def test_rate_limit_holds_across_four_processes(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    rate, burst, total = 250.0, 25, 2500
    await queue.configure("limited", rate=rate, burst=burst)
    await queue.enqueue_many("app.span", [{"ms": 1}] * total, queue="limited")
    async with spans_table(queue, conn) as table:
        with workers(dsn, queue.schema, 4, "--queues", "limited", "--concurrency", "50"):
            await wait_all_done(conn, queue, total, within=120)
        starts = sorted(await conn.fetchval(f"SELECT array_agg(started) FROM {table}"))
    assert len(starts) == total
    # Any 1 s window: at most burst + rate x (1 s + 0.25 s, for the time from a claim's
    # commit to its handler's start).
    for i, t0 in enumerate(starts):
        window = 0
        for t in starts[i:]:
            if t >= t0 + 1.0:
                break
            window += 1
        assert window <= burst + rate * 1.25, (i, window)
    achieved = (total - burst) / (starts[-1] - starts[0])
    # The limit is the upper bound; below it, how many start also depends on the machine
    # (97.5/s of 250 was seen in a CI slow set, 175-275 alone): the lower bound only says
    # the limiter does not starve the queue.
    assert 0.3 * rate < achieved < 1.1 * rate, achieved


async def test_a_crashed_workers_jobs_count_until_they_are_rescued(
    dsn: str, queue: Queue, conn: asyncpg.Connection, ledger: str
) -> None:
    # The 2 slots of the queue are held by a worker that dies. Its jobs count as
    # running until their lease expires and the rescuer puts them back; only then do
    # the other jobs of the queue start.
    await queue.configure("default", concurrency=2)
    await queue.enqueue_many("app.sleep", [{"seconds": 60}] * 2)
    await queue.enqueue_many("app.noop", [{"n": n} for n in range(5)])
    lease = 1.0
    with workers(
        dsn,
        queue.schema,
        1,
        "--heartbeat-interval",
        "0.2",
        "--visibility-timeout",
        str(lease),
    ) as (proc,):
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 2 FROM {ledger}"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    killed_at = time.time()
    starts: dict[str, list[float]] = defaultdict(list)

    @queue.task(name="app.noop")
    async def noop(n: int) -> None:
        starts["noop"].append(time.time())

    @queue.task(name="app.sleep")
    async def sleep(seconds: float) -> None:
        starts["sleep"].append(time.time())

    healthy = queue.worker(
        heartbeat_interval=0.2,
        visibility_timeout=lease,
        maintenance_interval=0.2,
        poll_interval=0.2,
    )
    async with healthy:

        async def all_done() -> bool:
            statuses = {row["status"]: row["jobs"] for row in await queue.status()}
            return statuses == {JobStatus.DONE.value: 7}

        await eventually(all_done)
    # Nothing started while the dead worker's jobs held the slots: the last heartbeat
    # was at most 0.2 s before the kill, its lease ran out `lease` s after it.
    assert min(starts["noop"]) >= killed_at + lease - 0.2 - 0.1
    assert len(starts["noop"]) == 5 and len(starts["sleep"]) == 2


def run_cli(dsn: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "aiopgq", "--dsn", dsn, "--schema", schema, *args]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


async def test_cli_shows_and_sets_a_queues_limits(dsn: str, queue: Queue) -> None:
    done = run_cli(
        dsn, queue.schema, "queue", "exports", "--concurrency", "3", "--rate", "50", "--burst", "10"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == (
        "queue exports concurrency 3 rate 50.0 burst 10 key_concurrency none".split()
    )
    done = run_cli(
        dsn, queue.schema, "queue", "exports", "--rate", "none", "--key-concurrency", "2"
    )
    assert done.returncode == 0, done.stderr
    assert await queue.queue_settings("exports") == QueueSettings("exports", 3, None, 10, 2)
    shown = run_cli(dsn, queue.schema, "queue", "exports")
    assert "key_concurrency  2" in shown.stdout
    bad = run_cli(dsn, queue.schema, "queue", "exports", "--rate", "fast")
    assert bad.returncode == 2
    assert "--rate: takes a number or 'none', not 'fast'" in bad.stderr
    refused = run_cli(dsn, queue.schema, "queue", "exports", "--concurrency", "0")
    assert refused.returncode == 2
    assert refused.stderr.startswith("aiopgq: concurrency must be an int >= 1")
    assert "Traceback" not in bad.stderr + refused.stderr
