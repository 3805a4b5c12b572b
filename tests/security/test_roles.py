"""Least privilege, injection through every name a user passes, no passwords in messages."""

from __future__ import annotations

import logging
import uuid

import asyncpg
import pytest

from aiopgq import ConfigurationError, JobStatus, Queue
from aiopgq._db.dsn import redact

from ..support.helpers import eventually
from ..support.legacy_schema import install_up_to


async def test_producer_and_worker_roles_work_with_least_privilege(
    dsn: str, queue: Queue, roles: tuple[str, str]
) -> None:
    producer_role, worker_role = roles
    ran: list[int] = []

    producer = Queue(dsn, schema=queue.schema, connect_kwargs={"user": producer_role})
    worker_queue = Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker_role})

    @worker_queue.task(name="least.priv")
    async def least(n: int) -> int:
        ran.append(n)
        return n * 10

    async with producer:
        job = await producer.enqueue("least.priv", {"n": 1})
        keyed = await producer.enqueue("least.priv", {"n": 2}, idempotency_key="k")
        assert (await producer.enqueue("least.priv", {"n": 2}, idempotency_key="k")).id == keyed.id
        await producer.enqueue_many("least.priv", [{"n": 3}, {"n": 4}])
        async with producer.pool.acquire() as pconn:
            sql_id = await pconn.fetchval(
                f"SELECT \"{queue.schema}\".enqueue('least.priv', '{{\"n\": 5}}'::jsonb)"
            )
            assert sql_id is not None
            # The producer cannot claim, change, delete or read others' job rows.
            for statement, args in (
                (queue.sql.dequeue, ("default", 10, "thief")),
                (f'DELETE FROM "{queue.schema}".jobs', ()),
                (f"UPDATE \"{queue.schema}\".jobs SET status = 'done'", ()),
                (f'SELECT payload FROM "{queue.schema}".jobs', ()),
            ):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await pconn.fetch(statement, *args)

    await worker_queue.worker().run(burst=True)
    assert sorted(ran) == [1, 2, 3, 4, 5]

    async with producer, producer.pool.acquire() as pconn:
        row = await pconn.fetchrow(f'SELECT * FROM "{queue.schema}".job_status($1)', job.id)
        assert row["status"] == JobStatus.DONE.value
        assert row["result"] == "10"
    # Another role does not see the producer's jobs through job_status().
    status_of_other = await queue.pool.fetchval(
        f'SELECT count(*) FROM "{queue.schema}".job_status($1)', job.id
    )
    assert status_of_other == 0

    # The worker role prunes (retention 0: every finished row). Pruning in the first
    # burst raced the status check above when that burst outlived one maintenance pass.
    async def pruned() -> bool:
        return await queue.pool.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 0

    async with worker_queue.worker(retention=0, maintenance_interval=0.05):
        await eventually(pruned, within=10)


async def test_keys_and_schedules_with_least_privilege(
    dsn: str, queue: Queue, roles: tuple[str, str], conn: asyncpg.Connection
) -> None:
    producer_role, worker_role = roles
    async with Queue(dsn, schema=queue.schema, connect_kwargs={"user": producer_role}) as producer:
        mine = await producer.enqueue("keyed", {"n": 1}, idempotency_key="mine")
        again = await producer.enqueue("keyed", {"n": 2}, idempotency_key="mine")
        assert (again.id, again.payload) == (mine.id, {"n": 1})  # its own job, read back
        theirs = await queue.enqueue("keyed", {"secret": 1}, idempotency_key="theirs")
        # A job another role enqueued is not the producer's to read (nor to replace).
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="another role"):
            await producer.enqueue("keyed", {"n": 3}, idempotency_key="theirs")
        assert (await queue.enqueue("keyed", {}, idempotency_key="theirs")).id == theirs.id

    # The worker role enqueues periodic ticks (take_ticks), though it cannot INSERT jobs.
    worker_queue = Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker_role})
    ran: list[int] = []

    @worker_queue.periodic("* * * * * *", name="least.tick")
    async def least_tick() -> None:
        ran.append(1)

    async with worker_queue.worker(maintenance_interval=0.5):
        await eventually(lambda: ran, within=20)
    enqueued_by = await conn.fetchval(
        f'SELECT enqueued_by FROM "{queue.schema}".jobs WHERE task = $1 LIMIT 1', "least.tick"
    )
    assert enqueued_by == worker_role


async def test_roles_granted_before_version_10_get_its_functions(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    quoted = f'"{schema}"'
    await install_up_to(conn, schema, 9)
    suffix = uuid.uuid4().hex[:8]
    producer, worker = f"old_producer_{suffix}", f"old_worker_{suffix}"
    try:
        for role, grant in ((producer, "grant_producer"), (worker, "grant_worker")):
            await conn.execute(f'CREATE ROLE "{role}" LOGIN')
            await conn.execute(f"SELECT {quoted}.{grant}($1)", role)
        await install_up_to(conn, schema, 19, after=9)
        assert 21 in await Queue(dsn, schema=schema).migrate()
        can = "SELECT has_function_privilege($1, $2, 'EXECUTE')"
        unique = f"{quoted}.enqueue_unique(text, jsonb, text[], text, integer, timestamptz, "
        unique += "integer, interval, text)"
        assert await conn.fetchval(can, producer, unique)
        assert not await conn.fetchval(can, worker, unique)
        ticks = f"{quoted}.take_ticks(text, timestamptz, timestamptz, text, text, integer, "
        ticks += "integer, timestamptz[], text[])"
        assert await conn.fetchval(can, worker, ticks)
        assert not await conn.fetchval(can, producer, ticks)
    finally:
        for role in (producer, worker):
            await conn.execute(f'DROP OWNED BY "{role}"')
            await conn.execute(f'DROP ROLE "{role}"')


async def test_worker_role_cannot_enqueue(dsn: str, queue: Queue, roles: tuple[str, str]) -> None:
    _, worker_role = roles
    async with Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker_role}) as wq:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await wq.enqueue("x", {})


INJECTIONS = ['x"; drop table jobs; --', "x'; drop table jobs; --", "Robert'); DROP TABLE jobs;--"]


@pytest.mark.parametrize("nasty", INJECTIONS)
async def test_injection_through_every_user_supplied_name(
    dsn: str, queue: Queue, conn: asyncpg.Connection, nasty: str
) -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        Queue(dsn, schema=nasty)
    # Values travel as bind parameters: stored verbatim, nothing executed.
    job = await queue.enqueue(nasty, {nasty: nasty}, queue=nasty, idempotency_key=nasty)
    stored = await queue.get_job(job.id)
    assert (stored.task, stored.queue, stored.payload) == (nasty, nasty, {nasty: nasty})
    await queue.set_notify(nasty, False)
    worker = queue.worker(queues=[nasty])
    await worker.run(burst=True)  # unknown task: failed, not executed as SQL
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 1


async def test_passwords_never_appear_in_errors_logs_or_repr(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dsn = "postgresql://app:hunter2@127.0.0.1:1/nowhere"
    queue = Queue(dsn, schema="aiopgq")
    assert "hunter2" not in repr(queue)
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigurationError) as info:
        await queue.open()
    assert "hunter2" not in str(info.value)
    assert "***" in str(info.value)
    assert "hunter2" not in caplog.text
    assert redact("postgres://u:p%40ss@h/db") == "postgres://u:***@h/db"
