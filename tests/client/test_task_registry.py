"""Enqueue by name honours the declaration of the task that a worker registered."""

from __future__ import annotations

import logging
import signal
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import Job, Queue, TaskNotFound

from ..support.cli import cli, run_cli
from ..support.helpers import eventually
from ..support.legacy_schema import install_up_to

APP_TASKS = ["app.crash", "app.mail", "app.noop", "app.sleep", "app.span"]


@pytest.fixture
async def registered(dsn: str, queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[None]:
    """A worker process of tests/support/app.py (on queue "default" only, so that jobs of
    "emails" stay pending for the test to look at) has registered its tasks."""
    proc = cli(dsn, queue.schema, "worker", "tests.support.app:queue", "--queues", "default")
    try:
        registered = f'SELECT count(*) = {len(APP_TASKS)} FROM "{queue.schema}".tasks'
        await eventually(lambda: conn.fetchval(registered))
        yield
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        proc.kill()


def lands_on_emails(job: Job) -> None:
    assert (job.task, job.queue, job.max_attempts, job.priority) == ("app.mail", "emails", 2, 3)


async def test_enqueue_by_name_from_python_cli_and_sql_uses_the_declaration(
    dsn: str, queue: Queue, conn: asyncpg.Connection, registered: None
) -> None:
    assert not queue.tasks  # this process registered nothing
    lands_on_emails(await queue.enqueue("app.mail", {"to": "a@example.com"}))
    lands_on_emails(await queue.get_job((await queue.enqueue("app.mail", {"to": "b"})).id))
    for job in await queue.enqueue_many("app.mail", [{"to": "c"}, {"to": "d"}]):
        lands_on_emails(await queue.get_job(job.id))
    assert await queue.copy_many("app.mail", [{"to": "e"}]) == 1

    enqueued = run_cli(
        dsn, queue.schema, "--schema", queue.schema, "enqueue", "app.mail", '{"to": "f"}'
    )
    assert enqueued.returncode == 0, enqueued.stderr
    lands_on_emails(await queue.get_job(int(enqueued.stdout)))

    sql_id = await conn.fetchval(
        f'SELECT "{queue.schema}".enqueue(\'app.mail\', \'{{"to": "g"}}\')'
    )
    lands_on_emails(await queue.get_job(sql_id))

    # What the caller gives wins over the declaration, everywhere.
    job = await queue.enqueue("app.mail", {"to": "h"}, queue="other", max_attempts=7, priority=0)
    assert (job.queue, job.max_attempts, job.priority) == ("other", 7, 0)
    sql_id = await conn.fetchval(
        f"SELECT \"{queue.schema}\".enqueue('app.mail', '{{\"to\": \"i\"}}', queue => 'other', "
        "max_attempts => 7, priority => 0)"
    )
    job = await queue.get_job(sql_id)
    assert (job.queue, job.max_attempts, job.priority) == ("other", 7, 0)
    counts = {(r["queue"], r["status"]): r["jobs"] for r in await queue.status()}
    assert counts == {("emails", "pending"): 7, ("other", "pending"): 2}


async def test_an_unknown_name_is_refused_with_the_known_ones(
    dsn: str, queue: Queue, conn: asyncpg.Connection, registered: None
) -> None:
    with pytest.raises(TaskNotFound) as info:
        await queue.enqueue("app.mial", {"to": "x"})
    assert info.value.task == "app.mial" and info.value.known == APP_TASKS
    message = str(info.value)
    assert "no task named 'app.mial' is registered (known: app.crash, app.mail," in message
    assert "@queue.task(name='app.mial')" in message
    with pytest.raises(TaskNotFound):
        await queue.enqueue_many("app.mial", [{}])

    refused = run_cli(dsn, queue.schema, "--schema", queue.schema, "enqueue", "app.mial", "{}")
    assert refused.returncode == 1
    assert refused.stderr.startswith("aiopgq: no task named 'app.mial' is registered (known:")

    with pytest.raises(asyncpg.NoDataFoundError, match=r"known: app\.crash, app\.mail"):
        await conn.fetchval(f"SELECT \"{queue.schema}\".enqueue('app.mial')")
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 0


async def test_payload_is_checked_against_the_declared_arguments(
    queue: Queue, conn: asyncpg.Connection, registered: None
) -> None:
    with pytest.raises(
        TypeError, match=r"task app\.mail: got an unexpected keyword argument 'too'"
    ):
        await queue.enqueue("app.mail", {"to": "a", "too": "b"})
    with pytest.raises(TypeError, match=r"task app\.mail: missing a required argument: 'to'"):
        await queue.enqueue("app.mail", {"subject": "hi"})
    with pytest.raises(TypeError, match=r"missing a required argument: 'to'"):
        await queue.enqueue_many("app.mail", [{"to": "a"}, {}])
    function = f'"{queue.schema}".enqueue'
    with pytest.raises(asyncpg.InvalidParameterValueError, match=r"unexpected argument.*'too'"):
        await conn.fetchval(f"SELECT {function}('app.mail', '{{\"to\": 1, \"too\": 2}}')")
    with pytest.raises(asyncpg.InvalidParameterValueError, match=r"missing required.*'to'"):
        await conn.fetchval(f"SELECT {function}('app.mail', '{{\"subject\": 1}}')")
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 0


async def test_with_no_registered_task_enqueue_by_name_works_as_before(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    job = await queue.enqueue("anything.goes", {"x": 1})
    assert (job.queue, job.max_attempts, job.priority) == ("default", 5, 0)
    sql_id = await conn.fetchval(f"SELECT \"{queue.schema}\".enqueue('anything.else')")
    job = await queue.get_job(sql_id)
    assert (job.queue, job.max_attempts, job.priority) == ("default", 5, 0)
    enqueued = run_cli(dsn, queue.schema, "--schema", queue.schema, "enqueue", "third.one")
    assert enqueued.returncode == 0, enqueued.stderr


async def test_the_registry_is_read_once_and_never_for_tasks_registered_here(
    dsn: str, queue: Queue, conn: asyncpg.Connection, registered: None
) -> None:
    lands_on_emails(await queue.enqueue("app.mail", {"to": "a"}))  # reads the registry
    # With the registry unreadable, enqueue still works: from the queue's copy for a
    # task registered elsewhere (and unknown names are refused from it), and without
    # any read for a task registered in this process.
    await conn.execute(f'ALTER TABLE "{queue.schema}".tasks RENAME TO tasks_away')
    try:
        lands_on_emails(await queue.enqueue("app.mail", {"to": "b"}))
        with pytest.raises(TaskNotFound):
            await queue.enqueue("app.mial", {})
        async with Queue(dsn, schema=queue.schema) as own:

            @own.task(name="own.task", queue="mine", max_attempts=9)
            async def own_task(n: int) -> None: ...

            job = await own_task.enqueue(n=1)
            assert (job.queue, job.max_attempts) == ("mine", 9)
            job = await own.enqueue("own.task", {"n": 2})
            assert (job.queue, job.max_attempts) == ("mine", 9)
    finally:
        await conn.execute(f'ALTER TABLE "{queue.schema}".tasks_away RENAME TO tasks')


async def test_a_starting_worker_records_its_tasks(queue: Queue, conn: asyncpg.Connection) -> None:
    @queue.task(name="reg.one", queue="q1", priority=4, max_attempts=3)
    async def one(a: int, b: str = "", *, c: float, **more: object) -> None: ...

    @queue.task(name="reg.two")
    def two() -> None: ...

    worker = queue.worker()
    await worker.run(burst=True)
    rows = await conn.fetch(
        f"SELECT name, queue, priority, max_attempts, arguments, required, any_keyword, "
        f'registered_by FROM "{queue.schema}".tasks ORDER BY name'
    )
    assert [dict(r) for r in rows] == [
        {
            "name": "reg.one",
            "queue": "q1",
            "priority": 4,
            "max_attempts": 3,
            "arguments": ["a", "b", "c"],
            "required": ["a", "c"],
            "any_keyword": True,
            "registered_by": worker.id,
        },
        {
            "name": "reg.two",
            "queue": "default",
            "priority": 0,
            "max_attempts": 5,
            "arguments": [],
            "required": [],
            "any_keyword": False,
            "registered_by": worker.id,
        },
    ]
    # The worker that starts last wins.
    other = Queue(queue.dsn, schema=queue.schema)

    @other.task(name="reg.one", queue="q2")
    async def one_again(a: int) -> None: ...

    await other.worker().run(burst=True)
    row = await conn.fetchrow(
        f"SELECT queue, arguments, registered_at > first_registered_at AS again "
        f"FROM \"{queue.schema}\".tasks WHERE name = 'reg.one'"
    )
    assert dict(row) == {"queue": "q2", "arguments": ["a"], "again": True}


async def test_roles_granted_before_the_registry_can_use_it_after_migrating(
    dsn: str, schema: str, conn: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    quoted = f'"{schema}"'
    await install_up_to(conn, schema, 8)
    suffix = uuid.uuid4().hex[:8]
    producer_role, worker_role = f"aiopgq_p_{suffix}", f"aiopgq_w_{suffix}"
    for role in (producer_role, worker_role):
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    await conn.execute(f"SELECT {quoted}.grant_producer($1)", producer_role)
    await conn.execute(f"SELECT {quoted}.grant_worker($1)", worker_role)
    try:
        await install_up_to(conn, schema, 19, after=8)
        await Queue(dsn, schema=schema).migrate()
        worker_queue = Queue(dsn, schema=schema, connect_kwargs={"user": worker_role})

        @worker_queue.task(name="old.role", queue="roles", max_attempts=2)
        async def old_role(n: int) -> None: ...

        with caplog.at_level(logging.WARNING, logger="aiopgq"):
            await worker_queue.worker().run(burst=True)
        assert "cannot record" not in caplog.text
        async with Queue(dsn, schema=schema, connect_kwargs={"user": producer_role}) as producer:
            job = await producer.enqueue("old.role", {"n": 1})
            assert (job.queue, job.max_attempts) == ("roles", 2)
            with pytest.raises(TaskNotFound):
                await producer.enqueue("old.rule", {"n": 1})
    finally:
        for role in (producer_role, worker_role):
            await conn.execute(f'DROP OWNED BY "{role}"')
            await conn.execute(f'DROP ROLE "{role}"')
