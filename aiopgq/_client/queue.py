"""Queue: the public client, one class composed of parts; every method is here, and each
body is one call into the part that owns it (aiopgq/_client/*.py) or the lifecycle.

The parts share one Core (the schema, statements, pool, tasks and observers): enqueue
(Enqueue), operators' actions (Admin), limits (Limits), the partitioned layout
(Partitions), reads (Read), awaited results (Results) and hooks (Hooks).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

import asyncpg

from .._context import Middleware
from .._db import migrations
from .._db.connection import Connection
from .._db.dsn import check_dsn, redact
from .._db.pool import connect, create_pool
from .._db.statements import Statements
from .._enqueue_options import EnqueueManyOptions, EnqueueOptions
from .._errors import ConfigurationError
from .._models import ArchiveLayout, Job, JobStatus, QueueSettings, QueueStats
from .._observer import Observer
from .._retry import Retry
from .._schedule import Schedule, with_tick
from .._task import Task
from .._worker.worker import Worker
from .admin import Admin
from .core import Core
from .enqueue import Enqueue
from .events import emit_event
from .hooks import EnqueueHook, Hooks
from .job_steps import JobSteps, read_steps
from .limits import KEEP, Keep
from .limits import Limits as LimitsPart
from .partitions import Partitions
from .read import Read
from .results import Results
from .workflow_builder import WorkflowBuilder
from .workflows import Workflow, Workflows

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M", bound=Middleware)
H = TypeVar("H", bound=EnqueueHook)


class Queue:
    """A job queue in one PostgreSQL schema.

    Its database: `dsn` (a postgresql:// URL), else `pool` (an asyncpg pool of yours), else
    the environment's AIOPGQ_DSN, else DATABASE_URL; ConfigurationError when none is set.

    >>> queue = Queue()  # AIOPGQ_DSN
    >>> queue = Queue("postgresql://localhost/app", enqueue_retry_for=15)
    >>> async with queue: await queue.enqueue("demo.add", {"a": 1, "b": 2})

    `enqueue_retry_for` (seconds or a timedelta, default 0: fail at once) makes enqueues
    wait out a database they cannot reach, retrying only what cannot run twice (docs/tasks.md,
    "Producers during an outage").

    Args:
        dsn: the database's postgresql:// URL (default None: `pool`, else the environment).
        pool: an asyncpg pool of yours, used as it is and not closed by `close()`.
        schema: the PostgreSQL schema of the queue's tables (default "aiopgq").
        min_pool_size: connections the pool opens at start (default 1).
        max_pool_size: the most connections of the pool it creates (default 10).
        max_payload_bytes: the largest payload an enqueue accepts, in bytes of JSON text
            (default 1,000,000).
        connect_kwargs: more arguments of asyncpg's connect, for every connection it opens.
        observers: Observers of its enqueues and its workers' jobs, in order (default none).
        enqueue_retry_for: seconds (or a timedelta, 0 to 86400) an enqueue waits out an
            unreachable database (default None: 0, fail at once).

    Raises:
        ConfigurationError: no database given or set, a bad DSN or schema name, or a bad
            `enqueue_retry_for`.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: asyncpg.Pool | None = None,
        schema: str = "aiopgq",
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        max_payload_bytes: int = 1_000_000,
        connect_kwargs: Mapping[str, Any] | None = None,
        observers: Sequence[Observer] = (),
        enqueue_retry_for: float | timedelta | None = None,
    ) -> None:
        self._core = core = Core(
            dsn,
            pool=pool,
            schema=schema,
            pool_sizes=(min_pool_size, max_pool_size),
            max_payload_bytes=max_payload_bytes,
            connect_kwargs=connect_kwargs,
            observers=observers,
            enqueue_retry_for=enqueue_retry_for,
        )
        self._hooks = Hooks()
        self._enqueue = Enqueue(core, self._hooks, self)
        self._admin = Admin(core)
        self._limits = LimitsPart(core)
        self._partitions = Partitions(core)
        self._read = Read(core, self)
        self._results = Results(core, self)
        self._workflows = Workflows(core, self._enqueue, self._hooks)

    def __repr__(self) -> str:
        where = redact(self.dsn) if self.dsn else "external pool"
        return f"<Queue schema={self.schema} {where}>"

    # -- what the queue is ---------------------------------------------------------

    @property
    def schema(self) -> str:
        """The PostgreSQL schema of the queue's tables."""
        return self._core.schema

    @property
    def dsn(self) -> str | None:
        """The database URL the queue connects to (None with an external pool)."""
        return self._core.dsn

    @property
    def tasks(self) -> dict[str, Task[Any, Any]]:
        """The tasks registered on this queue, by name."""
        return self._core.tasks

    @property
    def schedules(self) -> dict[str, Schedule]:
        """The schedules of the periodic tasks registered on this queue, by task name."""
        return self._core.schedules

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload (JSON bytes) an enqueue accepts."""
        return self._core.max_payload_bytes

    @property
    def is_open(self) -> bool:
        """True once open() made (or was given) a pool, until close()."""
        return self._core.pool_or_none is not None

    @property
    def pool(self) -> asyncpg.Pool:
        """The open asyncpg pool, for statements of your own; QueueNotOpen when closed.
        Its connections skip asyncpg's reset on release: leave no session state behind."""
        return self._core.pool

    @property
    def sql(self) -> Statements:
        """The schema's SQL statements, for the worker runtime; not for applications."""
        return self._core.sql

    def connect_args(self) -> tuple[str | None, dict[str, Any]]:
        """How to open a connection outside the pool (the worker's own connections).

        Returns:
            The DSN (None for an external pool given without one) and asyncpg's connect
                keyword arguments.
        """
        return self._core.connect_args()

    # -- lifecycle -------------------------------------------------------------

    def reconfigure(
        self,
        *,
        dsn: str | None = None,
        schema: str | None = None,
        max_pool_size: int | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """Point a closed queue at another database or schema, size its pool, or add asyncpg
        connect arguments (the CLI's --dsn, --schema, --max-pool-size and
        --statement-cache-size); None keeps a setting.

        >>> queue.reconfigure(schema="staging")

        Args:
            dsn: another database's postgresql:// URL (the queue then makes its own pool).
            schema: another schema.
            max_pool_size: the most connections of the pool, >= 1.
            connect_kwargs: asyncpg connect arguments, added to those the queue has.

        Raises:
            RuntimeError: the queue is open.
            ConfigurationError: a bad DSN, schema name or `max_pool_size`.
        """
        core = self._core
        if core.pool_or_none is not None:
            raise RuntimeError("reconfigure() needs a closed queue")
        if connect_kwargs:
            core.connect_kwargs.update(connect_kwargs)
        if dsn is not None:
            core.dsn = check_dsn(dsn)
            core.owns_pool = True
        if schema is not None:
            core.set_schema(schema)
        if max_pool_size is not None:
            if max_pool_size < 1:
                raise ConfigurationError(f"max_pool_size must be >= 1, got {max_pool_size}")
            core.pool_sizes = (min(core.pool_sizes[0], max_pool_size), max_pool_size)
        core.registry = type(core.registry)()  # another database's registry

    async def open(self, *, retry_for: float = 0.0) -> None:
        """Create the connection pool (a no-op for an external or open pool).

        An unreachable server raises ConfigurationError at once; with `retry_for`, it is
        retried with backoff for that many seconds first (a WARNING on the `aiopgq.queue`
        logger when the outage starts, reminders every 30 s), e.g. while a database
        container starts next to yours. Wrong credentials or a missing database fail at once.

        >>> await queue.open(retry_for=30)  # wait up to 30 s for the server

        Args:
            retry_for: how long to retry an unreachable server, in seconds (default 0: no
                retry).

        Raises:
            CannotConnect: the server could not be reached within `retry_for`, or refused
                the connection (a ConfigurationError).
        """
        core = self._core
        if core.pool_or_none is not None:
            return
        assert core.dsn is not None
        core.pool_or_none = await create_pool(
            core.dsn, core.pool_sizes, core.connect_kwargs, retry_for=retry_for
        )

    async def close(self) -> None:
        """Close the pool if this Queue created it (and stop waiting for jobs)."""
        core = self._core
        core.registry_lock = None  # bound to this event loop
        await self._results.close()
        if core.owns_pool and core.pool_or_none is not None:
            pool, core.pool_or_none = core.pool_or_none, None
            await pool.close()

    async def __aenter__(self) -> Queue:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def migrate(self) -> list[int]:
        """Create or upgrade the schema; returns the versions applied. Needs no open():
        a closed queue uses a connection of its own. Safe to run concurrently.

        >>> await queue.migrate()  # [] when already up to date

        Returns:
            The schema versions applied, oldest first ([] when it was up to date).

        Raises:
            SchemaError: the schema is newer than this aiopgq, or too old to upgrade.
            CannotConnect: a closed queue could not connect.
        """
        core = self._core
        if core.pool_or_none is None:
            assert core.dsn is not None
            own = await connect(core.dsn, core.connect_kwargs)
            try:
                return await migrations.migrate(own, core.schema)
            finally:
                await own.close()
        async with core.pool.acquire() as conn:
            return await migrations.migrate(conn, core.schema)

    async def check_schema(self) -> None:
        """Raise SchemaError unless the schema matches this aiopgq ("run `aiopgq migrate`").

        Raises:
            SchemaError: the schema is missing, older or newer than this aiopgq needs.
            QueueNotOpen: the queue is not open.
        """
        async with self._core.pool.acquire() as conn:
            await migrations.check_version(conn, self._core.schema)

    # -- tasks -----------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 5,
        priority: int = 0,
        timeout: float | None = None,
        retry: Retry | None = None,
        max_snoozes: int = 100,
        key_concurrency: int | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(  # type: ignore[misc]  # mypy cannot match the typevars of overload 2
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 5,
        priority: int = 0,
        timeout: float | None = None,
        retry: Retry | None = None,
        max_snoozes: int = 100,
        key_concurrency: int | None = None,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register an `async def` (run on the loop) or `def` (run in a thread) as a task.

        >>> @queue.task(name="demo.add", queue="default", max_attempts=5)
        ... async def add(a: int, b: int) -> int: return a + b

        `key_concurrency=K` declares the key limit of the task's queue: at most K running
        jobs per `concurrency_key` of that queue (jobs of every task in it), fleet-wide,
        with the keys taking turns, as `configure(queue, key_concurrency=K)` sets it. The
        limit is the queue's, applied by the workers that serve this task: a worker
        claims the queue with the smallest K its tasks of that queue declare. A limit
        set with `configure` (or `aiopgq queue NAME --key-concurrency K`) wins over
        every declaration; `configure(queue, key_concurrency=None)` brings them back.
        Workers whose tasks declare different limits for one queue each apply their
        own: configure the queue to give the fleet one.
        A worker that starts with a declared limit builds the index key limits need
        and the queue's row if its role owns the tables, else logs a warning.

        Args:
            fn: the function, when used as `@queue.task` without parentheses.
            name: the task's name (default None: the function's module and qualified name).
            queue: the queue its jobs go to (default "default").
            max_attempts: the most runs of a job before it ends failed (default 5, >= 1).
            priority: its jobs' priority, a 32-bit int, higher first (default 0).
            timeout: seconds a run may take before it is cancelled and counts as a failed
                attempt (default None: no limit).
            retry: the backoff between failed attempts (default None: `Retry()`).
            max_snoozes: the snoozes of a job that do not count as a failed attempt
                (default 100, >= 0).
            key_concurrency: the key limit declared for the task's queue, an int >= 1
                (default None: none).

        Returns:
            The Task (with `fn`), else a decorator that registers the function it gets.

        Raises:
            ConfigurationError: a task of that name is registered, or a bad
                `key_concurrency`.
            ValueError: a bad queue name, `max_attempts`, `priority`, `timeout` or
                `max_snoozes`.
            TypeError: a `priority` that is not an int, or a parameter a payload cannot
                carry (positional-only, *args, named as an enqueue option, a second
                JobContext).
        """

        def register(func: Callable[P, R]) -> Task[P, R]:
            return self._core.register_task(
                self._enqueue,
                func,
                name=name,
                queue_name=queue,
                max_attempts=max_attempts,
                priority=priority,
                timeout=timeout,
                retry=retry,
                max_snoozes=max_snoozes,
                key_concurrency=key_concurrency,
            )

        return register(fn) if fn is not None else register

    def periodic(
        self,
        cron: str,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        missed: str = "latest",
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 5,
        timeout: float | None = None,
        retry: Retry | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a task that runs on a cron schedule (5 fields, or 6 with seconds first).

        >>> @queue.periodic("*/5 * * * *", name="reports.refresh", timezone="Europe/Berlin")
        ... async def refresh(tick: datetime) -> None: ...

        Args:
            cron: the schedule: 5 cron fields, 6 with seconds first, or an alias ("@daily").
            name: the task's name (default None: the function's module and qualified name).
            timezone: the IANA time zone the schedule reads in (default "UTC").
            missed: what ticks missed while no worker ran become: "latest" (default: the
                newest once), "skip" or "all" (docs/periodic.md).
            queue: the queue its jobs go to (default "default").
            priority: its jobs' priority, a 32-bit int, higher first (default 0).
            max_attempts: the most runs of a tick's job (default 5, >= 1).
            timeout: seconds a run may take (default None: no limit).
            retry: the backoff between failed attempts (default None: `Retry()`).

        Returns:
            A decorator that registers the function it gets (taking the tick as `tick`,
                a datetime in the schedule's time zone, if it declares that parameter) and
                returns its Task.

        Raises:
            ConfigurationError: a bad schedule, time zone or `missed`, or a task of that
                name is registered (raised by the decorator).
            ValueError: a bad queue name, `priority` or `max_attempts` (by the decorator).
            TypeError: a parameter but `tick` without a default, or one a payload cannot
                carry, as `task` (by the decorator).
        """

        def register(fn: Callable[P, R]) -> Task[P, R]:
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            schedule = Schedule(
                cron,
                name=task_name,
                timezone=timezone,
                missed=missed,
                queue_name=queue,
                priority=priority,
                max_attempts=max_attempts,
            )
            task: Task[P, R] = self._core.register_task(
                self._enqueue,
                with_tick(fn, task_name, schedule.zone),
                name=task_name,
                queue_name=queue,
                max_attempts=max_attempts,
                priority=priority,
                timeout=timeout,
                retry=retry,
            )
            self._core.schedules[task_name] = schedule
            return task

        return register

    # -- workers ---------------------------------------------------------------

    def worker(self, queues: Sequence[str] | None = None, **options: Any) -> Worker:
        """A worker for these queues (default: every queue of the registered tasks).

        >>> worker = queue.worker(queues=["default"], concurrency=50)
        >>> await worker.run()

        Args:
            queues: the queues it claims from (default None: every queue of the tasks).
            **options: the Worker's keyword arguments (concurrency, poll_interval, ...).

        Returns:
            The Worker, not started.

        Raises:
            ConfigurationError: no queues, or a bad option value.
            ValueError: a bad queue name.
            TypeError: an option the Worker does not take.
        """
        return Worker(self, queues=queues, **options)

    # -- enqueue ---------------------------------------------------------------

    async def enqueue(
        self,
        task: str,
        payload: Mapping[str, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Job:
        """Enqueue a job by task name. Defaults and argument checks come from the task if
        registered here, else from the registry workers keep (TaskNotFound for a name
        no worker registered, while some registered others), else queue "default".
        With an `idempotency_key`, a job already holding the key is returned instead
        (docs/unique.md for `on_conflict` and `unique_for`). `concurrency_key`
        is the job's key for its queue's per-key limit (`Queue.configure`).

        >>> await queue.enqueue("demo.add", {"a": 1, "b": 2}, delay=5)
        >>> await queue.enqueue("demo.add", {"a": 1, "b": 2}, idempotency_key="add-1-2")

        `enqueue_retry_for` waits out an unreachable database for this call (docs/tasks.md,
        "Producers during an outage"); the queue's `enqueue_retry_for` when None.

        Args:
            task: the task's name.
            payload: the handler's keyword arguments, JSON values (default None: none).
            **options: the enqueue options, each None (or left out) for the task's
                setting, else the default: `queue` (a name, default "default"), `run_at`
                (an aware datetime) or `delay` (seconds or a timedelta, 0 to 10 years),
                `priority` (a 32-bit int, higher first; default 0), `max_attempts` (an
                int, at least 1; default 5), `idempotency_key` (a str of up to 1,000 bytes),
                `on_conflict` ("ignore", the default, "replace" or "raise"; docs/unique.md),
                `unique_for` (seconds or a timedelta a done job keeps its key),
                `concurrency_key` (a str of up to 200 characters), `depends_on` (jobs or
                ids, one or a list, that must be done before it runs: docs/workflows.md),
                `on_parent_failure` ("cancel", the default, or "run"), `sequence_key` (a
                str of up to 200 characters: jobs of one key run one at a time in enqueue
                order, a failed one holds the rest until retried or cancelled;
                docs/workflows.md), `connection` (an asyncpg connection of yours: the job
                commits with your transaction) and
                `enqueue_retry_for` (seconds or a timedelta, 0 to 86400; None: the
                queue's).

        Returns:
            The new Job (with its id), or the job that holds the idempotency key.

        Raises:
            TypeError: an unknown option, an argument the task does not take, a payload
                that is not JSON, `run_at` with `delay`, or an option of the wrong type.
            ValueError: an option out of its range, or a payload over `max_payload_bytes`.
            TaskNotFound: no worker registered the task, while some registered others.
            DuplicateJob: with `on_conflict="raise"`, a job holds the idempotency key.
            JobNotFound: a job in `depends_on` does not exist (or was pruned).
            PayloadTooLarge: the database refused the payload as over its size limit.
            ConfigurationError: a bad `enqueue_retry_for`, or one with `connection`.
            QueueNotOpen: the queue is not open (and no `connection` was given).
            SchemaError: the schema is missing (run `aiopgq migrate`).
        """
        return await self._enqueue.one(task, payload, None, options)

    async def enqueue_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        **options: Unpack[EnqueueManyOptions],
    ) -> list[Job]:
        """Enqueue one job per payload in a single statement (one round trip).

        `idempotency_keys` has one key (or None) per payload; a payload whose key is held
        gets the holder's Job back, in its place.

        >>> jobs = await queue.enqueue_many("demo.add", [{"a": 1, "b": 2}] * 1000)
        >>> jobs = await queue.enqueue_many("demo.add", payloads, idempotency_keys=keys)

        Args:
            task: the task's name.
            payloads: one dict of the handler's keyword arguments per job.
            **options: the enqueue options of `Queue.enqueue` (the same defaults, one set
                for every job), with `idempotency_keys` (one key or None per payload) in
                place of `idempotency_key`.

        Returns:
            The Jobs, in the order of the payloads.

        Raises:
            TypeError: an unknown option, an argument the task does not take, a payload
                that is not JSON, `run_at` with `delay`, or an option of the wrong type.
            ValueError: an option out of its range, keys not one per payload, or a payload
                over `max_payload_bytes`.
            TaskNotFound: no worker registered the task, while some registered others.
            DuplicateJob: with `on_conflict="raise"`, a job holds the idempotency key.
            JobNotFound: a job in `depends_on` does not exist (or was pruned).
            PayloadTooLarge: the database refused the payload as over its size limit.
            ConfigurationError: a bad `enqueue_retry_for`, or one with `connection`.
            QueueNotOpen: the queue is not open (and no `connection` was given).
            SchemaError: the schema is missing (run `aiopgq migrate`).
        """
        return await self._enqueue.many(task, payloads, None, options)

    async def copy_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        **options: Unpack[EnqueueManyOptions],
    ) -> int:
        """Enqueue with COPY (no JSON parsing on the server); returns the count, no ids.

        With `idempotency_keys` the rows go through the keyed insert of enqueue_many
        (COPY cannot skip a held key) and the count is of the jobs it created.

        >>> await queue.copy_many("demo.add", ({"a": i, "b": i} for i in range(100_000)))

        Args:
            task: the task's name.
            payloads: one dict of the handler's keyword arguments per job.
            **options: the options of `enqueue_many`.

        Returns:
            How many jobs it created.

        Raises:
            TypeError: as `enqueue_many`.
            ValueError: as `enqueue_many`.
            TaskNotFound: as `enqueue_many`.
            DuplicateJob: as `enqueue_many`.
            PayloadTooLarge: as `enqueue_many`.
            ConfigurationError: as `enqueue_many`.
            QueueNotOpen: as `enqueue_many`.
            SchemaError: as `enqueue_many`.
        """
        return await self._enqueue.copy(task, payloads, None, options)

    # -- results ---------------------------------------------------------------

    # A timeout argument, as asyncio.wait_for has (ASYNC109).
    async def result(self, job_id: int, timeout: float | None = None) -> Any:
        """The stored return value of the job, waiting until it ends.

        >>> job = await add.enqueue(1, b=2)
        >>> await queue.result(job.id, timeout=30)  # 3

        Args:
            job_id: the job's id.
            timeout: the longest wait, in seconds (default None: no limit).

        Returns:
            What the handler returned, as JSON decoded.

        Raises:
            JobFailed: the job ended failed.
            JobCancelled: the job ended cancelled.
            JobNotFound: no job has this id.
            TimeoutError: the job did not end within `timeout` seconds.
            QueueNotOpen: the queue is not open.
        """
        return (await self._results.wait_for_job(job_id, timeout)).result

    async def wait_for_job(self, job_id: int, timeout: float | None = None) -> Job:
        """The job as it ended (done). The waiters of every Queue of the process on one
        database share one LISTEN connection.

        >>> job = await queue.wait_for_job(job_id, timeout=30)
        >>> job.status, job.result, job.finished_at

        Args:
            job_id: the job's id.
            timeout: the longest wait, in seconds (default None: no limit).

        Returns:
            The job as it ended, done.

        Raises:
            JobFailed: the job ended failed.
            JobCancelled: the job ended cancelled.
            JobNotFound: no job has this id.
            TimeoutError: the job did not end within `timeout` seconds.
            QueueNotOpen: the queue is not open.
        """
        return await self._results.wait_for_job(job_id, timeout)

    # -- workflows (aiopgq/_client/workflows.py) --------------------------------

    def workflow(self, name: str) -> WorkflowBuilder:
        """A workflow builder: its `add` and `add_many` make a graph of jobs, `enqueue()`
        writes it in one transaction (docs/workflows.md).

        >>> wf = queue.workflow("nightly"); a = wf.add(fetch, "x"); wf.add(load, depends_on=[a])
        >>> wid = await wf.enqueue()

        Args:
            name: the workflow's name (shown by get_workflow and `aiopgq workflows`).

        Returns:
            A new WorkflowBuilder.

        Raises:
            ValueError: an empty name.
        """
        return self._workflows.builder(name)

    async def get_workflow(self, workflow_id: int) -> Workflow:
        """A workflow as it is now: its status, counts per job status, groups and jobs
        (each with its task, status, parents, group and times), read in one snapshot.

        >>> wf = await queue.get_workflow(wid); wf.status, wf.counts

        Args:
            workflow_id: the id `WorkflowBuilder.enqueue()` returned.

        Returns:
            The Workflow.

        Raises:
            WorkflowNotFound: no workflow has this id.
            QueueNotOpen: the queue is not open.
        """
        return await self._workflows.get(workflow_id)

    async def wait_for_workflow(self, workflow_id: int, timeout: float | None = None) -> Workflow:
        """The workflow once no job of it is pending, waiting or running (it reads its
        counts, every 20 ms at first, backing off to every 500 ms).

        >>> wf = await queue.wait_for_workflow(wid, timeout=60); wf.status

        Args:
            workflow_id: the workflow's id.
            timeout: the longest wait, in seconds (default None: no limit).

        Returns:
            The Workflow as it ended (status done, failed or cancelled).

        Raises:
            WorkflowNotFound: no workflow has this id.
            TimeoutError: it did not end within `timeout` seconds.
            QueueNotOpen: the queue is not open.
        """
        return await self._workflows.wait(workflow_id, timeout)

    async def cancel_workflow(self, workflow_id: int) -> int:
        """Cancel a workflow's unfinished jobs (pending, waiting, running: as `cancel` does
        each, in one statement) and mark it cancelled; returns how many it cancelled.

        >>> await queue.cancel_workflow(wid)

        Args:
            workflow_id: the workflow's id.

        Returns:
            The number of jobs this call cancelled.

        Raises:
            WorkflowNotFound: no workflow has this id.
            QueueNotOpen: the queue is not open.
        """
        return await self._workflows.cancel(workflow_id)

    async def list_workflows(self, limit: int = 20) -> list[Workflow]:
        """The most recent workflows, newest first, with their counts (no jobs or groups:
        get_workflow reads those).

        >>> [(w.id, w.name, w.status) for w in await queue.list_workflows(limit=10)]

        Args:
            limit: how many (default 20, >= 1).

        Returns:
            The Workflows, newest first.

        Raises:
            ValueError: a bad `limit`.
            QueueNotOpen: the queue is not open.
        """
        return await self._workflows.recent(limit)

    @property
    def result_poll_interval(self) -> float:
        """Seconds between reads of awaited jobs while the waiters' LISTEN connection is
        down (default 1): the longest a waiter then waits past its job's end."""
        return self._results.poll_interval

    @result_poll_interval.setter
    def result_poll_interval(self, seconds: float) -> None:
        self._results.poll_interval = seconds

    @property
    def result_listen_dsn(self) -> str | None:
        """Where waiters LISTEN when the queue's database is behind pgbouncer in transaction
        mode (LISTEN needs a session): a direct address; None: $AIOPGQ_LISTEN_DSN, else the
        queue's database."""
        return self._results.listen_dsn

    @result_listen_dsn.setter
    def result_listen_dsn(self, dsn: str | None) -> None:
        self._results.listen_dsn = dsn

    @property
    def waiter_name(self) -> str:
        """application_name of the waiters' LISTEN connection (pg_stat_activity), shared by
        every Queue of this process on the same database."""
        return self._results.waiter_name

    # -- hooks and observers -----------------------------------------------------

    def middleware(self, fn: M) -> M:
        """Register `async def fn(ctx, call_next)` around every job's handler run by this
        queue's workers (register before they start). `await call_next()` runs the next
        middleware, then the handler, and returns its result; what `fn` returns is stored
        as the job's result; what it raises fails the job like the handler's own error.

        >>> @queue.middleware
        ... async def timed(ctx, call_next): t = time.monotonic(); r = await call_next(); ...

        Args:
            fn: the middleware, an `async def` of (ctx, call_next).

        Returns:
            `fn` itself, so this works as a decorator.

        Raises:
            TypeError: `fn` is not an `async def`.
        """
        return self._hooks.add_middleware(fn)

    @property
    def middlewares(self) -> Sequence[Middleware]:
        """The middleware, in the order registered (the first is the outermost)."""
        return self._hooks.middleware

    def on_enqueue(self, fn: H) -> H:
        """Register `fn(job)` (a function or an `async def`), called with each Job after
        enqueue or enqueue_many inserted it (copy_many returns no Jobs and calls none), in
        the order registered. An error of a hook is logged (logger `aiopgq.queue`) and
        does not fail the enqueue: the job is written.

        >>> @queue.on_enqueue
        ... def count(job): ENQUEUED.labels(job.task).inc()

        Args:
            fn: the hook, a function or an `async def` of one Job.

        Returns:
            `fn` itself, so this works as a decorator.

        Raises:
            TypeError: `fn` is not callable.
        """
        return self._hooks.add_enqueue_hook(fn)

    @property
    def observer(self) -> Observer | None:
        """The observers as one (None without any): what enqueue and workers call."""
        return self._core.observer

    @property
    def observers(self) -> list[Observer]:
        """The observers given to the queue, in order."""
        return list(self._core.observers)

    def add_observer(self, observer: Observer) -> None:
        """Observe this queue's enqueues and its workers' jobs from now on (workers
        started before keep the observers they started with).

        >>> queue.add_observer(aiopgq.metrics.Metrics())

        Args:
            observer: an Observer (a subclass's instance).

        Raises:
            TypeError: `observer` is not an aiopgq.Observer.
        """
        self._core.add_observer(observer)

    # -- operators' actions ------------------------------------------------------

    async def pause(self, queue: str) -> None:
        """Stop workers from claiming the queue's jobs (running jobs finish; enqueue works).

        Workers hear of it at once by NOTIFY, and in any case within one poll interval.

        >>> await queue.pause("emails")
        >>> await queue.resume("emails")  # workers claim again at once

        Args:
            queue: the queue's name.

        Raises:
            ValueError: a bad queue name.
            QueueNotOpen: the queue is not open.
        """
        await self._admin.pause(queue)

    async def resume(self, queue: str) -> None:
        """Let workers claim the queue's jobs again, and wake them now.

        >>> await queue.resume("emails")

        Args:
            queue: the queue's name.

        Raises:
            ValueError: a bad queue name.
            QueueNotOpen: the queue is not open.
        """
        await self._admin.resume(queue)

    async def paused_queues(self) -> list[str]:
        """The paused queues, sorted.

        >>> await queue.paused_queues()
        ['emails']

        Returns:
            The names of the paused queues, sorted.

        Raises:
            QueueNotOpen: the queue is not open.
        """
        return await self._admin.paused_queues()

    async def cancel(self, job_id: int) -> bool:
        """Cancel a pending, waiting or running job: True if this call cancelled it, False if
        it had finished (nothing changes); JobNotFound, as get_job, when no job has that id.

        A running job ends `cancelled` at once and is not retried; its worker stops the
        handler as soon as it hears of it (by NOTIFY, else at its next heartbeat). A `def`
        handler running in a thread cannot be interrupted: its result is discarded. The
        jobs that depend on it (`depends_on=`) are cancelled with it, unless they were
        enqueued with `on_parent_failure="run"` (docs/workflows.md). A failed job of a
        sequence (`sequence_key=`) can be cancelled too: the rest of its sequence then goes
        on.

        >>> if await queue.cancel(job.id): print("cancelled, running or not")

        Args:
            job_id: the job's id.

        Returns:
            True if this call cancelled the job, False if it had ended already.

        Raises:
            JobNotFound: no job has this id.
            QueueNotOpen: the queue is not open.
        """
        return await self._admin.cancel(job_id)

    async def retry(self, job_id: int) -> bool:
        """Re-queue a failed or cancelled job as new (attempts reset, run now); its past
        errors stay in `Job.errors`. False if the job is in another state, or a live job
        holds its idempotency key; JobNotFound if there is no such job. The jobs that its
        failure cancelled (`depends_on=`) wait for it again (docs/workflows.md).

        >>> await queue.retry(job.id)
        True

        Args:
            job_id: the job's id.

        Returns:
            True if the job was re-queued.

        Raises:
            JobNotFound: no job has this id.
            QueueNotOpen: the queue is not open.
        """
        return await self._admin.retry(job_id)

    async def retry_failed(self, queue: str | None = None, task: str | None = None) -> int:
        """Re-queue every failed job (of one queue and/or task, if given); returns how many.

        Cancelled jobs are left alone (retry them one by one with `retry`). Of several
        failed jobs with the same idempotency key, only the newest is re-queued, and
        none while a live job holds the key.

        >>> await queue.retry_failed(queue="emails")
        12

        Args:
            queue: only the failed jobs of this queue (default None: every queue).
            task: only the failed jobs of this task (default None: every task).

        Returns:
            How many jobs were re-queued.

        Raises:
            ValueError: a bad queue name.
            QueueNotOpen: the queue is not open.
        """
        return await self._admin.retry_failed(queue, task)

    async def emit_event(
        self, name: str, payload: Any = None, *, connection: Connection | None = None
    ) -> int:
        """Emit event `name`: the jobs waiting for it in `ctx.wait_event(name)` become
        runnable in this call's transaction and get `payload`; a job that waits later gets
        it at once (the last emission of a name is kept 30 days). SQL:
        `SELECT aiopgq.emit_event('payment:42', '{"ok": true}')`.

        >>> await queue.emit_event(f"payment:{order_id}", {"amount": 1200})
        1

        Args:
            name: the event's name (one per occurrence: "payment:42", not "payment").
            payload: a JSON value for the waiters (default None).
            connection: an asyncpg connection of yours: the emit commits with your
                transaction (default None: a pool connection, committed at once).

        Returns:
            How many waiting jobs it woke.

        Raises:
            ValueError: `name` is empty.
            TypeError: `payload` cannot be stored as JSON.
            QueueNotOpen: the queue is not open and no connection was given.
        """
        return await emit_event(self._core, name, payload, connection)

    async def job_steps(self, job_id: int) -> JobSteps:
        """A job's recorded durable steps (name, kind, when, duration) and what it waits for
        (an event, or a sleep's end). A job pruned or archived has none.

        >>> (await queue.job_steps(job.id)).waiting_for
        'event payment:42'

        Args:
            job_id: the job's id.

        Returns:
            Its steps, in order, and its current wait.

        Raises:
            QueueNotOpen: the queue is not open.
        """
        return await read_steps(self._core, job_id)

    async def set_notify(self, queue: str, enabled: bool) -> None:
        """Turn the insert trigger's NOTIFY on or off for a queue (off = poll-only).

        Args:
            queue: the queue's name.
            enabled: True: inserts notify the workers; False: workers find jobs by polling.

        Raises:
            ValueError: a bad queue name.
            QueueNotOpen: the queue is not open.
        """
        await self._admin.set_notify(queue, enabled)

    # -- limits ----------------------------------------------------------------

    async def configure(
        self,
        queue: str,
        *,
        concurrency: int | Keep | None = KEEP,
        rate: float | Keep | None = KEEP,
        burst: int | Keep | None = KEEP,
        key_concurrency: int | Keep | None = KEEP,
    ) -> QueueSettings:
        """Set a queue's limits for every worker; settings not passed keep their value,
        None removes one. Workers apply a change at their next claim (a NOTIFY tells
        them; they also look every poll interval).

        - `concurrency`: at most this many jobs of the queue run at once.
        - `rate`, `burst`: job starts per second on average, at most `burst` at once
          (a token bucket; default burst: one second's worth of the rate).
        - `key_concurrency`: at most this many running jobs per `concurrency_key`, and
          claims take turns over the keys. The first key limit of the schema builds an
          index of pending jobs by key (CONCURRENTLY: may take a while on a large table,
          blocks nothing), as the owner of the tables.

        >>> await queue.configure("exports", concurrency=3, rate=50.0, burst=10)
        >>> await queue.configure("exports", rate=None)  # the rate limit goes

        Args:
            queue: the queue's name.
            concurrency: the most jobs of the queue running at once, an int >= 1.
            rate: job starts per second on average, > 0 and at most 1e9.
            burst: the most starts at once above the rate, an int >= 1.
            key_concurrency: the most running jobs per `concurrency_key`, an int >= 1.

        Returns:
            The queue's limits as stored now.

        Raises:
            ConfigurationError: a limit out of its range, or the first key limit set by a
                role that does not own the tables.
            ValueError: a bad queue name.
            QueueNotOpen: the queue is not open.
        """
        return await self._limits.configure(
            queue, concurrency=concurrency, rate=rate, burst=burst, key_concurrency=key_concurrency
        )

    async def queue_settings(self, queue: str) -> QueueSettings:
        """The queue's limits as stored (all None when it has none).

        >>> (await queue.queue_settings("exports")).concurrency

        Args:
            queue: the queue's name.

        Returns:
            Its limits (None each where it has none).

        Raises:
            ValueError: a bad queue name.
            QueueNotOpen: the queue is not open.
        """
        return await self._limits.queue_settings(queue)

    # -- the partitioned layout ----------------------------------------------------

    async def enable_partitioning(
        self,
        *,
        archive_after: float | timedelta = 300,
        partition_width: float | timedelta = timedelta(days=1),
    ) -> ArchiveLayout:
        """Switch on the partitioned layout for finished jobs (for tens of millions of jobs
        a day): the workers' maintenance moves each job finished `archive_after` ago out
        of the jobs table into time-range partitions, and retention drops whole
        partitions instead of deleting rows. Existing finished jobs move over in batches.

        >>> await queue.enable_partitioning(archive_after=300, partition_width=86400)
        >>> await queue.disable_partitioning()  # back to the plain layout

        Args:
            archive_after: seconds (or a timedelta, >= 60) a finished job stays in the jobs
                table before it moves (default 300).
            partition_width: seconds (or a timedelta, >= 60, whole seconds) of finished_at
                per partition (default one day).

        Returns:
            The layout as it is now.

        Raises:
            TypeError: a value that is neither seconds nor a timedelta.
            ValueError: a value under 60 seconds, or a width of a fraction of a second.
            QueueNotOpen: the queue is not open.
        """
        return await self._partitions.enable_partitioning(
            archive_after=archive_after, partition_width=partition_width
        )

    async def disable_partitioning(self) -> ArchiveLayout:
        """Back to the plain layout: finished jobs stay in the jobs table and are pruned
        there. Jobs archived so far stay readable; their partitions are dropped as they
        pass the retention.

        >>> await queue.disable_partitioning()

        Returns:
            The layout as it is now.

        Raises:
            QueueNotOpen: the queue is not open.
        """
        return await self._partitions.disable_partitioning()

    async def archive_layout(self) -> ArchiveLayout:
        """The layout's settings and the archive's partitions, oldest first per status.

        >>> print((await queue.archive_layout()).enabled)

        Returns:
            The layout and its partitions.

        Raises:
            QueueNotOpen: the queue is not open.
        """
        return await self._partitions.archive_layout()

    # -- reads -----------------------------------------------------------------

    async def get_job(self, job_id: int, *, preview: bool = False) -> Job:
        """The job's current row; JobNotFound when no job has that id (never enqueued, or
        finished and pruned after the worker's retention).

        With `preview=True`, the job as the dashboard and the CLI show it: payload, result
        and checkpoint cut to their first 64 KiB of JSON text, or, when cut or not decodable
        (nested too deep for Python), a placeholder whose str() says why, with the size.

        >>> job = await queue.get_job(job_id)
        >>> job.status, job.result, job.last_error

        Args:
            job_id: the job's id.
            preview: True: payload, result and checkpoint cut to 64 KiB (default False).

        Returns:
            The job as it is now.

        Raises:
            JobNotFound: no job has this id.
            QueueNotOpen: the queue is not open.
        """
        return await self._read.get_job(job_id, preview=preview)

    async def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before: int | None = None,
        preview: bool = False,
    ) -> list[Job]:
        """The newest jobs (highest id first) with this status, queue and task, if given;
        with `before`, those with a lower id (the next page: pass the last id you got).

        With `preview=True`, the job as the dashboard and the CLI show it: payload, result
        and checkpoint cut to their first 1 KiB of JSON text, or, when cut or not decodable
        (nested too deep for Python), a placeholder whose str() says why, with the size.

        >>> failed = await queue.list_jobs(status="failed", queue="emails", limit=20)
        >>> older = await queue.list_jobs(status="failed", limit=20, before=failed[-1].id)

        Args:
            status: only jobs of this status (default None: any).
            queue: only jobs of this queue (default None: any).
            task: only jobs of this task (default None: any).
            limit: the most jobs returned, an int >= 1 (default 50).
            before: only jobs whose id is lower than this one (default None: the newest).
            preview: True: payload, result and checkpoint cut to 1 KiB (default False).

        Returns:
            The jobs, highest id first.

        Raises:
            ValueError: a bad status, `limit` or `before`.
            QueueNotOpen: the queue is not open.
        """
        return await self._read.list_jobs(
            status=status, queue=queue, task=task, limit=limit, before=before, preview=preview
        )

    async def status(self) -> list[dict[str, Any]]:
        """Job counts per queue and status over every job kept (the archive included), as
        `{"queue", "status", "jobs", "oldest_runnable_age", "progress"}` dicts: the rows of
        `queue_stats(window=None)`, for `aiopgq status`. Reads every finished row kept:
        for live views, poll `queue_stats()` instead.

        >>> {(r["queue"], r["status"]): r["jobs"] for r in await queue.status()}

        Returns:
            One dict per queue and status.

        Raises:
            QueueNotOpen: the queue is not open.
        """
        return await self._read.status()

    async def blocked_sessions(self) -> list[dict[str, Any]]:
        """Sessions of this database waiting on a lock, with the pids blocking them.

        Returns:
            One dict per waiting session: pid, application_name, state, wait_event_type,
                wait_event, xact_age (seconds), blocked_by (pids) and query (its first 200
                characters).

        Raises:
            QueueNotOpen: the queue is not open.
        """
        return await self._read.blocked_sessions()

    async def queue_stats(self, *, window: float | None = 60.0) -> list[QueueStats]:
        """Every known queue (with jobs pending, running or finished in the last `window`
        seconds, with settings or a pause, or with a task a worker registered; zeros when
        idle): its depth, what arrived and finished in the window, the mean progress of
        its running jobs, its pause state. `window=None`: every job kept.

        With a window it reads the partial indexes of pending, running and recently
        finished jobs, not the table: cheap enough to poll every second or two.

        >>> stats = await queue.queue_stats(window=60)
        >>> {q.queue: q.runnable for q in stats}

        Args:
            window: the window's length in seconds, > 0 (default 60; None: every job kept).

        Returns:
            One QueueStats per known queue.

        Raises:
            TypeError: a `window` that is not a number.
            ValueError: a `window` that is not finite and > 0.
            QueueNotOpen: the queue is not open.
        """
        return await self._read.queue_stats(window=window)

    async def latest_failures(self, limit: int = 10, *, preview: bool = False) -> list[Job]:
        """The jobs that failed last, newest first (by when they failed).

        Unlike `list_jobs(status="failed")`, which walks jobs in id order, it reads the
        index of finished jobs backwards: cheap to poll under millions of done jobs.

        `preview=True`: as list_jobs(preview=True).

        >>> for job in await queue.latest_failures(5): print(job.id, job.last_error)

        Args:
            limit: the most jobs returned, an int >= 1 (default 10).
            preview: True: payload, result and checkpoint cut to 1 KiB (default False).

        Returns:
            The failed jobs, the last to fail first.

        Raises:
            ValueError: a bad `limit`.
            QueueNotOpen: the queue is not open.
        """
        return await self._read.latest_failures(limit, preview=preview)

    async def schedule_status(self) -> list[dict[str, Any]]:
        """Every schedule in the database, with its last run and next run.

        >>> for row in await queue.schedule_status(): print(row["name"], row["next_run"])

        Returns:
            One dict per schedule.

        Raises:
            QueueNotOpen: the queue is not open.
        """
        return await self._read.schedule_status()
