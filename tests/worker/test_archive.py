"""The partitioned layout: finished jobs move to time-range partitions, retention drops them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from aiopgq import JobNotFound, JobStatus, Queue, Retry

from ..support.cli import run_cli
from ..support.helpers import eventually
from .test_retention import prune_once


async def finish_some(queue: Queue, conn: asyncpg.Connection) -> dict[str, int]:
    """One done, one failed (with its error history) and one cancelled job, all finished
    ten minutes ago (aged by hand: nobody waits in a test); their ids by status."""

    if "a.ok" not in queue.tasks:

        @queue.task(name="a.ok")
        async def ok(n: int) -> int:
            return n * 2

        @queue.task(name="a.bad", max_attempts=1, retry=Retry(base=0))
        async def bad() -> None:
            raise ValueError("broken for good")

    ok, bad = queue.tasks["a.ok"], queue.tasks["a.bad"]
    done, failed, cancelled = await ok.enqueue(21), await bad.enqueue(), await ok.enqueue(1)
    await queue.cancel(cancelled.id)
    await queue.worker().run(burst=True)
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '10 minutes' "
        "WHERE finished_at IS NOT NULL"
    )
    return {"done": done.id, "failed": failed.id, "cancelled": cancelled.id}


async def counts(conn: asyncpg.Connection, schema: str) -> tuple[int, int]:
    """Finished rows in jobs, and rows in the archive."""
    return (
        await conn.fetchval(
            f'SELECT count(*) FROM "{schema}".jobs '
            "WHERE status IN ('done', 'failed', 'cancelled')"
        ),
        await conn.fetchval(f'SELECT count(*) FROM "{schema}".jobs_archive'),
    )


async def maintain(queue: Queue, conn: asyncpg.Connection, until: Any, **options: Any) -> None:
    """A worker whose maintenance runs every 50 ms, until `until()` holds."""
    async with queue.worker(queues=["nothing"], maintenance_interval=0.05, **options):
        await eventually(until, within=20)


async def test_finished_jobs_move_to_the_archive_and_stay_readable(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    ids = await finish_some(queue, conn)
    before = {status: await queue.get_job(job_id) for status, job_id in ids.items()}
    await queue.enqueue("a.ok", {"n": 5})  # pending: it stays in jobs
    layout = await queue.enable_partitioning(archive_after=60, partition_width=3600)
    assert layout.enabled and (layout.archive_after, layout.partition_width) == (60, 3600)
    statuses = {p.status for p in layout.partitions}
    assert statuses == {"done", "failed", "cancelled"}
    firsts = [p for p in layout.partitions if p.from_at is None]
    assert sorted(p.name for p in firsts) == [
        "jobs_archive_cancelled_start",
        "jobs_archive_done_start",
        "jobs_archive_failed_start",
    ]

    async def archived() -> bool:
        return await counts(conn, queue.schema) == (0, 3)

    await maintain(queue, conn, archived)
    for status, job_id in ids.items():
        assert await queue.get_job(job_id) == before[status]  # every field, errors too
    assert (await queue.get_job(ids["done"])).result == 42
    listed = await queue.list_jobs()
    assert [j.id for j in listed] == sorted([*ids.values(), listed[0].id], reverse=True)
    assert [j.id for j in await queue.list_jobs(status="failed")] == [ids["failed"]]
    assert [j.id for j in await queue.latest_failures()] == [ids["failed"]]
    assert [j.id for j in await queue.list_jobs(limit=2, before=ids["cancelled"] + 1)] == [
        ids["cancelled"],
        ids["failed"],
    ]
    by_status = {row["status"]: row["jobs"] for row in await queue.status()}
    assert by_status == {"pending": 1, "done": 1, "failed": 1, "cancelled": 1}


async def test_retrying_an_archived_job_brings_it_back(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    ids = await finish_some(queue, conn)
    await queue.enable_partitioning(archive_after=60, partition_width=3600)

    async def archived() -> bool:
        return (await counts(conn, queue.schema))[0] == 0

    await maintain(queue, conn, archived)
    assert await queue.retry(ids["failed"])
    back = await queue.get_job(ids["failed"])
    assert (back.status, back.attempts, len(back.errors)) == (JobStatus.PENDING, 0, 1)
    assert await counts(conn, queue.schema) == (0, 2)
    assert not await queue.retry(ids["done"])  # a done job is not retried, and stays put
    assert await counts(conn, queue.schema) == (0, 2)
    assert await queue.retry(ids["cancelled"])
    assert await queue.retry_failed() == 0  # nothing failed left anywhere


async def test_retry_failed_reaches_the_archive(queue: Queue, conn: asyncpg.Connection) -> None:
    ids = await finish_some(queue, conn)
    await queue.enable_partitioning(archive_after=60, partition_width=3600)

    async def archived() -> bool:
        return (await counts(conn, queue.schema))[0] == 0

    await maintain(queue, conn, archived)
    assert await queue.retry_failed(task="a.bad") == 1
    assert (await queue.get_job(ids["failed"])).status is JobStatus.PENDING


async def test_retention_drops_whole_partitions_per_status(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    ids = await finish_some(queue, conn)
    await queue.enable_partitioning(archive_after=60, partition_width=60)

    async def archived() -> bool:
        return (await counts(conn, queue.schema))[0] == 0

    keep = {"retention": None, "failed_retention": None, "cancelled_retention": None}
    await maintain(queue, conn, archived, **keep)
    names = {p.name for p in (await queue.archive_layout()).partitions}
    assert "jobs_archive_done_start" in names

    # Done jobs are kept 1 s now: their first partition ends at or before now, so it
    # goes whole; failed and cancelled jobs are kept forever.
    async def dropped() -> bool:
        layout = await queue.archive_layout()
        return "jobs_archive_done_start" not in {p.name for p in layout.partitions}

    keep["retention"] = 1
    await maintain(queue, conn, dropped, **keep)
    assert await counts(conn, queue.schema) == (0, 2)
    table = f'"{queue.schema}".jobs_archive_done_start'
    assert await conn.fetchval("SELECT to_regclass($1)", table) is None
    assert (await queue.get_job(ids["failed"])).status is JobStatus.FAILED
    with pytest.raises(JobNotFound):
        await queue.get_job(ids["done"])


async def test_disable_stops_the_moves_and_keeps_the_archive_readable(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    ids = await finish_some(queue, conn)
    await queue.enable_partitioning(archive_after=60, partition_width=3600)

    async def archived() -> bool:
        return (await counts(conn, queue.schema))[0] == 0

    await maintain(queue, conn, archived)
    layout = await queue.disable_partitioning()
    assert not layout.enabled and layout.partitions  # the archive stays
    more = await finish_some(queue, conn)
    await prune_once(queue, conn, retention=None)  # one whole maintenance pass
    assert await counts(conn, queue.schema) == (3, 3)  # the new ones stay in jobs
    assert (await queue.get_job(ids["done"])).status is JobStatus.DONE
    assert (await queue.get_job(more["done"])).status is JobStatus.DONE


async def test_bad_settings_are_refused_with_the_rule(queue: Queue) -> None:
    with pytest.raises(ValueError, match="archive_after must be at least 60 seconds"):
        await queue.enable_partitioning(archive_after=5)
    with pytest.raises(ValueError, match="partition_width must be at least 60 seconds"):
        await queue.enable_partitioning(partition_width=timedelta(seconds=30))
    with pytest.raises(ValueError, match="partition_width must be whole seconds"):
        await queue.enable_partitioning(partition_width=90.5)
    with pytest.raises(TypeError, match="archive_after must be seconds or a timedelta"):
        await queue.enable_partitioning(archive_after="5m")  # type: ignore[arg-type]
    assert not (await queue.archive_layout()).enabled


async def test_the_archive_has_every_column_of_jobs(queue: Queue, conn: asyncpg.Connection) -> None:
    # The move inserts `SELECT *` of the deleted rows: a migration that adds a column
    # to jobs must add it to jobs_archive too.
    def columns(table: str) -> Any:
        return conn.fetch(
            "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute "
            "WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            f'"{queue.schema}".{table}',
        )

    assert [tuple(r) for r in await columns("jobs_archive")] == [
        tuple(r) for r in await columns("jobs")
    ]


async def test_a_least_privilege_worker_moves_and_drops(
    dsn: str, queue: Queue, conn: asyncpg.Connection, roles: tuple[str, str]
) -> None:
    # grant_worker gives what the archive needs: the move, and partitions made (every
    # pass calls archive_extend) and dropped through the owner's functions (a worker
    # role owns no table, and only a table's owner may create or drop its partitions).
    ids = await finish_some(queue, conn)
    await queue.enable_partitioning(archive_after=60, partition_width=60)
    worker_queue = Queue(dsn, schema=queue.schema, connect_kwargs={"user": roles[1]})

    async def archived() -> bool:
        return await counts(conn, queue.schema) == (0, 3)

    async with worker_queue:
        await maintain(worker_queue, conn, archived, retention=None)

        async def dropped() -> bool:
            return await counts(conn, queue.schema) == (0, 2)

        await maintain(worker_queue, conn, dropped, retention=1)
    assert (await queue.get_job(ids["failed"])).status is JobStatus.FAILED


async def test_the_partition_command(dsn: str, queue: Queue) -> None:
    def cli(*args: str) -> tuple[int, str, str]:
        done = run_cli(dsn, queue.schema, "partition", "--schema", queue.schema, *args)
        return done.returncode, done.stdout, done.stderr

    code, out, _ = cli()
    assert (code, out) == (0, "partitioned layout: off (finished jobs stay in the jobs table "
                              "until pruned)\n")  # fmt: skip
    code, out, err = cli("--enable", "--archive-after", "120", "--partition-width", "3600")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("partitioned layout: on since ")
    assert lines[0].endswith("move to the archive 120 s after they finish, 3600 s of finish "
                             "times per partition")  # fmt: skip
    assert lines[1].split() == ["partition", "status", "from", "to", "rows", "size"]
    assert lines[2].split()[:3] == ["jobs_archive_done_start", "done", "-"]
    assert len(lines) == 2 + 3 * 4  # per status: the first, the current and two ahead
    code, _, err = cli("--enable", "--archive-after", "5")
    assert (code, err) == (2, "aiopgq: archive_after must be at least 60 seconds, got 5.0\n")
    code, _, err = cli("--partition-width", "600")
    assert (code, err) == (2, "aiopgq: --archive-after and --partition-width go with --enable\n")
    code, out, _ = cli("--disable")
    assert code == 0 and out.startswith("partitioned layout: off")
    assert not (await queue.archive_layout()).enabled


async def test_a_done_job_holding_its_key_stays_until_its_window_ends(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # enqueue_unique reads a key's holder in jobs: the move leaves a done job there
    # while it holds its key (unique_for), as the pruner does, and moves it after.
    @queue.task(name="a.report")
    async def report(day: str) -> str:
        return day

    held = await report.enqueue("mon", idempotency_key="report", unique_for=3600)
    free = await report.enqueue("tue", idempotency_key="other", unique_for=60)
    await queue.worker().run(burst=True)
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '10 minutes'"
    )
    await queue.enable_partitioning(archive_after=60, partition_width=3600)

    async def archived() -> bool:
        return await counts(conn, queue.schema) == (1, 1)

    await maintain(queue, conn, archived)
    assert (await report.enqueue("mon 2", idempotency_key="report", unique_for=3600)).id == held.id
    again = await report.enqueue("tue 2", idempotency_key="other", unique_for=60)
    assert again.id != free.id  # its window was over: a new job
