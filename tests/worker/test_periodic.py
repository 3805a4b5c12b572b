"""Periodic jobs: schedules, missed ticks, time zones, the tick in the handler.

The scheduler's clock is driven here (Scheduler.tick(now=...)) to walk through days and
daylight-saving changes in milliseconds; tests/worker/test_periodic_processes.py runs
the real clock across worker processes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import asyncpg
import pytest

from aiopgq import ConfigurationError, JobStatus, Queue, current_job
from aiopgq._worker.scheduler import MAX_CATCH_UP, Scheduler

from ..support.helpers import eventually

BERLIN = ZoneInfo("Europe/Berlin")
UTC = timezone.utc


def scheduler(queue: Queue, name: str = "w1", interval: float = 5.0) -> Scheduler:
    return Scheduler(queue.pool, queue.sql, list(queue.schedules.values()), name, interval=interval)


async def ticks_of(conn: asyncpg.Connection, queue: Queue, task: str) -> list[datetime]:
    """The ticks that have a job, in order (each job runs at its tick)."""
    rows = await conn.fetch(
        f'SELECT t.tick, j.run_at, j.task FROM "{queue.schema}".periodic_ticks t '
        f'JOIN "{queue.schema}".jobs j ON j.id = t.job_id WHERE t.name = $1 ORDER BY t.tick',
        task,
    )
    assert all(row["run_at"] == row["tick"] and row["task"] == task for row in rows)
    return [row["tick"] for row in rows]


async def drive(
    schedulers: list[Scheduler], start: datetime, end: datetime, step: timedelta
) -> None:
    """Every scheduler passes at each step of the clock from start to end, all at once
    (in UTC: arithmetic on a zoned datetime is on its wall clock, which skips or repeats
    an hour at a daylight-saving change)."""
    now = start.astimezone(UTC)
    while now <= end:
        await asyncio.gather(*(s.tick(now=now) for s in schedulers))
        now += step


async def test_daily_job_runs_once_on_both_daylight_saving_days(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.periodic("30 2 * * *", name="nightly", timezone="Europe/Berlin")
    async def nightly(tick: datetime) -> None:
        pass

    sched = scheduler(queue)
    for first_day in (datetime(2024, 3, 29), datetime(2024, 10, 25)):
        start = first_day.replace(tzinfo=BERLIN)  # five days from midnight, to 03:00
        await conn.execute(f'DELETE FROM "{queue.schema}".schedules')
        await sched.register(since=start)
        end = start + timedelta(days=4, hours=3)
        await drive([sched], start, end, timedelta(minutes=10))
    local = [t.astimezone(BERLIN) for t in await ticks_of(conn, queue, "nightly")]
    assert [(t.month, t.day, t.hour, t.minute) for t in local] == [
        (3, 29, 2, 30),
        (3, 30, 2, 30),
        (3, 31, 3, 0),  # 02:30 does not exist: once, right after the gap
        (4, 1, 2, 30),
        (4, 2, 2, 30),
        (10, 25, 2, 30),
        (10, 26, 2, 30),
        (10, 27, 2, 30),  # 02:30 happens twice: once, at the first
        (10, 28, 2, 30),
        (10, 29, 2, 30),
    ]
    assert local[7].utcoffset() == timedelta(hours=2)  # summer time's 02:30


async def test_hourly_pace_goes_on_in_real_time_through_the_repeated_hour(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.periodic("*/30 * * * *", name="half.hourly", timezone="Europe/Berlin")
    async def half_hourly() -> None:
        pass

    start = datetime(2024, 10, 27, 0, 0, tzinfo=BERLIN)  # 7 real hours to 06:00
    sched = scheduler(queue)
    await sched.register(since=start)
    await drive([sched], start, datetime(2024, 10, 27, 6, 0, tzinfo=BERLIN), timedelta(minutes=7))
    ticks = await ticks_of(conn, queue, "half.hourly")
    assert len(ticks) == 14
    assert {b - a for a, b in itertools.pairwise(ticks)} == {timedelta(minutes=30)}


async def test_three_schedulers_on_one_clock_enqueue_each_tick_once(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.periodic("*/10 * * * * *", name="ten.seconds", missed="all")
    async def ten_seconds() -> None:
        pass

    start = datetime(2024, 1, 1, tzinfo=UTC)
    schedulers = [scheduler(queue, f"w{n}") for n in range(3)]
    await schedulers[0].register(since=start)
    await drive(schedulers, start, start + timedelta(minutes=5), timedelta(seconds=3))
    # A worker that restarts registers again: its progress is kept, nothing runs twice.
    restarted = scheduler(queue, "w-new")
    await restarted.register(since=start + timedelta(days=1))
    await drive(
        [restarted, *schedulers],
        start + timedelta(minutes=4),
        start + timedelta(minutes=10),
        timedelta(seconds=7),
    )
    ticks = await ticks_of(conn, queue, "ten.seconds")
    assert ticks == [start + timedelta(seconds=10 * n) for n in range(1, 60)]  # to 09:57
    workers = await conn.fetchval(
        f'SELECT last_worker FROM "{queue.schema}".schedules WHERE name = $1', "ten.seconds"
    )
    assert workers in {"w0", "w1", "w2", "w-new"}


@pytest.mark.parametrize(
    ("missed", "late", "expected"),
    [
        ("latest", 30, [10]),  # the newest missed tick, once
        ("skip", 30, []),  # more than one interval late: skipped
        ("skip", 2, [10]),  # within the interval: on time
        ("all", 30, list(range(1, 11))),
    ],
)
async def test_missed_ticks_follow_the_policy(
    queue: Queue,
    conn: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
    missed: str,
    late: int,
    expected: list[int],
) -> None:
    @queue.periodic("* * * * *", name="minutely", missed=missed)
    async def minutely() -> None:
        pass

    start = datetime(2024, 1, 1, tzinfo=UTC)
    sched = scheduler(queue, interval=5)
    await sched.register(since=start)
    with caplog.at_level(logging.WARNING, logger="aiopgq.scheduler"):
        # Down for ten minutes: the first pass finds ten ticks due.
        await sched.tick(now=start + timedelta(minutes=10, seconds=late))
    minute = [
        int((t - start).total_seconds() // 60) for t in await ticks_of(conn, queue, "minutely")
    ]
    assert minute == expected
    if len(expected) < 10:
        assert "were due at once" in caplog.text
    # Back on time, every policy runs the next tick.
    await sched.tick(now=start + timedelta(minutes=11, seconds=1))
    assert (await ticks_of(conn, queue, "minutely"))[-1] == start + timedelta(minutes=11)


async def test_all_catches_up_at_most_the_newest_bound(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.periodic("* * * * * *", name="every.second", missed="all")
    async def every_second() -> None:
        pass

    start = datetime(2024, 1, 1, tzinfo=UTC)
    sched = scheduler(queue)
    await sched.register(since=start)
    end = start + timedelta(hours=2)
    await sched.tick(now=end)
    ticks = await ticks_of(conn, queue, "every.second")
    assert len(ticks) == MAX_CATCH_UP == 1000
    assert ticks[-1] == end and ticks[0] == end - timedelta(seconds=999)


async def test_tick_reaches_the_handler_and_the_job_is_a_normal_job(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    seen: list[tuple[datetime, datetime | None, int]] = []
    plain: list[datetime | None] = []

    @queue.periodic("* * * * * *", name="with.tick", timezone="Europe/Berlin", max_attempts=2)
    async def with_tick(tick: datetime) -> None:
        job = current_job()
        seen.append((tick, job.tick, job.attempts))
        if job.attempts == 1:
            raise RuntimeError("first attempt fails: retried like any job")

    @queue.periodic("* * * * * *", name="without.tick", queue="other")
    def without_tick() -> None:  # a thread, and no tick parameter
        plain.append(current_job().tick)

    async with queue.worker(queues=["default", "other"], maintenance_interval=0.5):
        await eventually(lambda: len(seen) >= 2 and plain, within=20)
    tick, job_tick, _ = seen[0]
    assert tick == job_tick and tick.tzinfo is not None
    assert tick.utcoffset() == datetime.now(BERLIN).utcoffset()  # in the schedule's zone
    assert tick.microsecond == 0
    assert plain[0] is not None and plain[0].microsecond == 0
    job_id = await conn.fetchval(
        f'SELECT job_id FROM "{queue.schema}".periodic_ticks WHERE name = $1 AND tick = $2',
        "with.tick",
        tick,
    )
    job = await queue.get_job(job_id)
    assert job.tick == tick
    assert job.status in (JobStatus.PENDING, JobStatus.DONE)  # its retry ran, or will
    assert job.attempts >= 1
    statuses = {(row["queue"], row["status"]) for row in await queue.status()}
    assert ("other", "done") in statuses


async def test_periodic_options_are_checked_when_the_function_is_decorated(queue: Queue) -> None:
    cases = [
        ({"cron": "* * * *"}, "has 4 fields; use 5"),
        ({"cron": "* * * * * * *"}, "has 7 fields"),
        ({"cron": "61 * * * *"}, "bad schedule"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "* * * * *", "missed": "some"}, "missed='some'"),
    ]
    for options, message in cases:
        with pytest.raises(ConfigurationError, match=message):

            @queue.periodic(**options)  # type: ignore[arg-type]
            async def job() -> None:
                pass

    with pytest.raises(TypeError, match="parameter 'n' has no default"):

        @queue.periodic("* * * * *")
        async def needs_n(n: int) -> None:
            pass

    assert not queue.tasks and not queue.schedules  # nothing half-registered

    @queue.periodic("@daily", name="daily.ok")
    def daily(tick: datetime | None = None, *, limit: int = 3) -> int:
        return limit

    assert daily(limit=4) == 4  # still the function
    assert queue.schedules["daily.ok"].next_after(datetime(2024, 1, 1, 12, tzinfo=UTC)) == (
        datetime(2024, 1, 2, tzinfo=UTC)
    )


async def test_schedule_status_and_cli_list_last_and_next_run(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.periodic("0 3 * * *", name="reports.refresh", timezone="Europe/Berlin")
    async def refresh() -> None:
        pass

    sched = scheduler(queue)
    start = datetime(2024, 6, 1, tzinfo=BERLIN)
    await sched.register(since=start)
    await sched.tick(now=start + timedelta(hours=3, seconds=1))
    (row,) = await queue.schedule_status()
    assert row["name"] == "reports.refresh" and row["cron"] == "0 3 * * *"
    assert row["last_run"] == datetime(2024, 6, 1, 3, tzinfo=BERLIN)
    assert row["last_status"] == "pending" and row["last_worker"] == "w1"
    next_run = row["next_run"].astimezone(BERLIN)
    assert next_run > datetime.now(UTC) and (next_run.hour, next_run.minute) == (3, 0)

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "aiopgq", "--dsn", dsn, "--schema", queue.schema, "schedules"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    stdout = out.decode()
    assert proc.returncode == 0, err.decode()
    assert "reports.refresh" in stdout and "0 3 * * *" in stdout
    assert "pending" in stdout and "Europe/Berlin" in stdout


async def test_pruned_ticks_go_with_their_jobs_and_periodic_false_schedules_nothing(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.periodic("* * * * *", name="pruned.tick", missed="all")
    async def pruned_tick() -> None:
        pass

    start = datetime(2024, 1, 1, tzinfo=UTC)
    sched = scheduler(queue)
    await sched.register(since=start)
    await sched.tick(now=start + timedelta(minutes=5))
    assert len(await ticks_of(conn, queue, "pruned.tick")) == 5
    await queue.worker().run(burst=True)
    async with queue.worker(retention=0, maintenance_interval=0.05, periodic=False):

        async def pruned() -> bool:
            return await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 0

        await eventually(pruned)
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".periodic_ticks') == 0
    # That worker ran its maintenance many times, but no tick: periodic=False.
    row = await conn.fetchrow(f'SELECT last_tick, last_worker FROM "{queue.schema}".schedules')
    assert (row["last_tick"], row["last_worker"]) == (start + timedelta(minutes=5), "w1")
