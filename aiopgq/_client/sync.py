"""SyncQueue: enqueue from code that is not asyncio (Django, Flask, scripts) with psycopg 3.

The same checks as Queue (aiopgq/_enqueue_options.py, _payload.py, the task registry), the same
statements (sql/, with psycopg's placeholders), and the same wake-up: the insert
trigger notifies the workers, at the commit of the caller's transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._db.dsn import check_dsn, redact, resolve_dsn
from .._db.pooler import same_process_query
from .._db.statements import for_psycopg, render, statement_files, validate_identifier
from .._enqueue_options import (
    SYNC_MANY_JOBS_OPTIONS,
    SYNC_ONE_JOB_OPTIONS,
    Options,
    SyncEnqueueManyOptions,
    SyncEnqueueOptions,
    TaskDefaults,
    check_option_names,
)
from .._errors import ConfigurationError, JobNotFound, SchemaError
from .._models import Job, JobStatus, build_job, job_from_record
from .._task import Task
from .events import event_arguments
from .inserts import batch_jobs
from .prepare import prepare_many, prepare_one
from .queue import Queue
from .task_registry import Declaration, RegistryCache
from .unique import Uniqueness, duplicate_job, unique_arguments, unique_jobs

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

if TYPE_CHECKING:
    import psycopg

_STATEMENTS = (
    "insert_job",
    "insert_job_keyed",
    "insert_jobs",
    "insert_jobs_keyed",
    "enqueue_unique",
    "set_concurrency_key",
    "get_job",
    "registered_tasks",
    "add_dependencies",
    "add_to_sequence",
    "emit_event",
)


class SyncQueue:
    """A producer for synchronous code: enqueue jobs with psycopg 3 (the `sync` extra).

    >>> queue = SyncQueue("postgresql://localhost/app")  # or SyncQueue.from_queue(queue)
    >>> job = queue.enqueue("mail.send", {"to": "a@example.com"}, connection=conn)

    With `connection=` (a psycopg connection) the job commits or rolls back with the
    caller's transaction; without, it is committed at once on the queue's own
    connection (opened on first use, one at a time across threads).

    Args:
        dsn: the database's postgresql:// URL (default None: AIOPGQ_DSN, else
            DATABASE_URL, read when the queue first connects).
        schema: the PostgreSQL schema of the queue's tables (default "aiopgq").
        tasks: Tasks by name, whose defaults and argument checks enqueue uses (default
            None: the registry the workers keep).
        max_payload_bytes: the largest payload an enqueue accepts, in bytes of JSON text
            (default 1,000,000).
        connect_kwargs: more arguments of psycopg's connect, for its own connection.

    Raises:
        ConfigurationError: psycopg 3 is not installed, or a bad DSN or schema name.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "aiopgq",
        tasks: Mapping[str, Task[Any, Any]] | None = None,
        max_payload_bytes: int = 1_000_000,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        _psycopg()  # refuse at once when the extra is missing
        self.schema = validate_identifier(schema)
        self._dsn = check_dsn(dsn) if dsn else None
        self.tasks: dict[str, Task[Any, Any]] = dict(tasks or {})
        self.max_payload_bytes = max_payload_bytes
        self._connect_kwargs = dict(connect_kwargs or {})
        self._sql = {
            name: for_psycopg(render(statement_files()[name], schema)) for name in _STATEMENTS
        }
        self._registry = RegistryCache()
        self._lock = threading.Lock()  # the own connection, and registry reads
        self._own: psycopg.Connection[Any] | None = None

    @classmethod
    def from_queue(cls, queue: Queue) -> SyncQueue:
        """A SyncQueue on an aiopgq.Queue's database and schema, with its tasks (their
        arguments are checked as Task.enqueue checks them, without a registry read).

        >>> sync_queue = SyncQueue.from_queue(app.jobs.queue)

        Args:
            queue: the Queue whose DSN, schema, tasks and max_payload_bytes it takes.

        Returns:
            The SyncQueue, not connected yet.

        Raises:
            ConfigurationError: psycopg 3 is not installed.
        """
        return cls(
            queue.dsn,
            schema=queue.schema,
            tasks=queue.tasks,
            max_payload_bytes=queue.max_payload_bytes,
        )

    def __repr__(self) -> str:
        return f"<SyncQueue schema={self.schema} {redact(self._dsn or 'AIOPGQ_DSN')}>"

    # -- enqueue ---------------------------------------------------------------

    def enqueue(
        self,
        task: str,
        payload: Mapping[str, Any] | None = None,
        **options: Unpack[SyncEnqueueOptions],
    ) -> Job:
        """Enqueue a job by task name, with Queue.enqueue's checks, defaults and options
        (`connection`: a psycopg connection of yours, the job commits with it).

        >>> with conn.transaction():  # your psycopg connection
        ...     queue.enqueue("mail.send", {"to": "a@example.com"}, connection=conn)

        Args:
            task: the task's name.
            payload: the handler's keyword arguments, JSON values (default None: none).
            **options: the options of `Queue.enqueue` but `enqueue_retry_for`;
                `connection` is a psycopg connection.

        Returns:
            The new Job, or the job that holds the idempotency key.

        Raises:
            TypeError: as `Queue.enqueue`.
            ValueError: as `Queue.enqueue`.
            TaskNotFound: no worker registered the task, while some registered others.
            DuplicateJob: with `on_conflict="raise"`, a job holds the idempotency key.
            JobNotFound: a job in `depends_on` does not exist (or was pruned).
            SchemaError: the schema is missing or outdated (run `aiopgq migrate`).
            ConfigurationError: no database given or set, or it cannot be reached.
        """
        if options:
            check_option_names(options, SYNC_ONE_JOB_OPTIONS, "enqueue")
        with self._connection(options.get("connection")) as conn:
            job = prepare_one(
                task,
                payload,
                self._defaults(task, conn),
                options,
                options.get("idempotency_key"),
                self.max_payload_bytes,
            )
            opts = job.options
            if job.unique is not None:
                jobs, _ = self._enqueue_unique(
                    conn, task, [job.arguments], f"[{job.text}]", opts, job.unique
                )
                return jobs[0]
            values = (task, job.text, opts.queue, opts.priority, opts.run_at, opts.max_attempts)
            with self._parents_transaction(conn, opts):
                if opts.concurrency_key is None:
                    row = self._fetchone(conn, "insert_job", _params(*values))
                else:
                    row = self._fetchone(
                        conn, "insert_job_keyed", _params(*values, opts.concurrency_key, None)
                    )
                assert row is not None
                status = self._link(conn, [row[0]], opts)[0]
        assert row is not None
        return build_job(
            id=row[0],
            task=task,
            queue=opts.queue,
            payload=job.arguments,
            priority=opts.priority,
            run_at=row[1],
            created_at=row[2],
            max_attempts=opts.max_attempts,
            concurrency_key=opts.concurrency_key,
            status=status,
        )

    def enqueue_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        **options: Unpack[SyncEnqueueManyOptions],
    ) -> list[Job]:
        """Enqueue one job per payload in one statement, with Queue.enqueue_many's options.

        >>> jobs = queue.enqueue_many("mail.send", [{"to": "a"}, {"to": "b"}])

        Args:
            task: the task's name.
            payloads: one dict of the handler's keyword arguments per job.
            **options: the options of `Queue.enqueue_many` but `enqueue_retry_for`;
                `connection` is a psycopg connection.

        Returns:
            The Jobs, in the order of the payloads.

        Raises:
            TypeError: as `Queue.enqueue`.
            ValueError: as `Queue.enqueue`.
            TaskNotFound: no worker registered the task, while some registered others.
            DuplicateJob: with `on_conflict="raise"`, a job holds the idempotency key.
            JobNotFound: a job in `depends_on` does not exist (or was pruned).
            SchemaError: the schema is missing or outdated (run `aiopgq migrate`).
            ConfigurationError: no database given or set, or it cannot be reached.
        """
        if options:
            check_option_names(options, SYNC_MANY_JOBS_OPTIONS, "enqueue_many")
        with self._connection(options.get("connection")) as conn:
            batch, unique = prepare_many(
                task,
                payloads,
                self._defaults(task, conn),
                options,
                options.get("idempotency_keys"),
                self.max_payload_bytes,
            )
            if not batch.payloads:
                return []
            opts = batch.options
            if unique is not None:
                jobs, _ = self._enqueue_unique(
                    conn, task, batch.payloads, batch.as_array(), opts, unique
                )
                return jobs
            values = (task, batch.as_array(), opts.queue, opts.priority, opts.run_at)
            with self._parents_transaction(conn, opts):
                if opts.concurrency_key is None:
                    row = self._fetchone(conn, "insert_jobs", _params(*values, opts.max_attempts))
                else:
                    params = _params(*values, opts.max_attempts, opts.concurrency_key, None)
                    row = self._fetchone(conn, "insert_jobs_keyed", params)
                assert row is not None
                ids, created_at = row
                statuses = self._link(conn, ids, opts)
        jobs = batch_jobs(batch, ids, created_at)
        return [
            job if status is JobStatus.PENDING else dataclasses.replace(job, status=status)
            for job, status in zip(jobs, statuses, strict=True)
        ]

    def _parents_transaction(
        self, conn: psycopg.Connection[Any], opts: Options
    ) -> contextlib.AbstractContextManager[Any]:
        """The insert and its parents and sequence in one transaction (a savepoint inside
        the caller's); nothing for jobs without either."""
        return conn.transaction() if opts.linked else contextlib.nullcontext()

    def _link(
        self, conn: psycopg.Connection[Any], ids: list[int], opts: Options
    ) -> list[JobStatus]:
        """The new jobs' parents (depends_on), then their sequence (sequence_key), given
        in the insert's transaction; the status each has now."""
        statuses = [self._add_parents(conn, ids, opts)] * len(ids)
        if opts.sequence_key is not None:
            with _schema_errors(self.schema):
                rows = conn.execute(
                    self._sql["add_to_sequence"], _params(list(ids), opts.sequence_key)
                ).fetchall()
            statuses = [JobStatus(row[1]) for row in rows]
        return statuses

    def _add_parents(
        self, conn: psycopg.Connection[Any], ids: list[int], opts: Options
    ) -> JobStatus:
        """The new jobs' parents (depends_on), given in the insert's transaction; the
        status they all have now."""
        if not opts.parents:
            return JobStatus.PENDING
        from psycopg import errors

        try:
            row = self._fetchone(
                conn,
                "add_dependencies",
                _params(list(ids), list(opts.parents), opts.on_parent_failure),
            )
        except errors.ForeignKeyViolation as exc:
            raise JobNotFound(str(exc).strip()) from None
        assert row is not None
        return JobStatus(row[1])

    def _defaults(self, task: str, conn: psycopg.Connection[Any]) -> TaskDefaults | None:
        """The task registered here, else the registry's declaration, if any."""
        return self.tasks.get(task) or self._declared(task, conn)

    def _enqueue_unique(
        self,
        conn: psycopg.Connection[Any],
        task: str,
        payloads: list[dict[str, Any]],
        array_text: str,
        opts: Options,
        unique: Uniqueness,
    ) -> tuple[list[Job], int]:
        """Keyed jobs through enqueue_unique(), as Queue enqueues them."""
        from psycopg import errors
        from psycopg.rows import dict_row

        params = _params(*unique_arguments(task, array_text, opts, unique))
        try:
            with _schema_errors(self.schema), conn.transaction():
                rows = (
                    conn.cursor(row_factory=dict_row)
                    .execute(self._sql["enqueue_unique"], params)
                    .fetchall()
                )
                if opts.concurrency_key is not None:  # set before any claim sees them
                    made = [r["id"] for r in rows if r["outcome"] in ("inserted", "replaced")]
                    conn.execute(
                        self._sql["set_concurrency_key"], _params(made, opts.concurrency_key)
                    )
        except errors.UniqueViolation as exc:
            duplicate = duplicate_job(
                exc.diag.constraint_name,
                exc.diag.message_detail,
                exc.diag.message_primary or str(exc),
            )
            if duplicate is None:
                raise
            raise duplicate from None
        return unique_jobs(task, payloads, opts, rows)

    def get_job(self, job_id: int, *, connection: psycopg.Connection[Any] | None = None) -> Job:
        """The job's current row.

        >>> queue.get_job(job.id).status

        Args:
            job_id: the job's id.
            connection: a psycopg connection of yours to read on (default None: the
                queue's own).

        Returns:
            The job as it is now.

        Raises:
            JobNotFound: no job has this id.
            SchemaError: the schema is missing or outdated.
            ConfigurationError: no database given or set, or it cannot be reached.
        """
        from psycopg.rows import dict_row

        with self._connection(connection) as conn, _schema_errors(self.schema):
            row = conn.cursor(row_factory=dict_row).execute(
                self._sql["get_job"], _params(job_id, None)
            )
            found = row.fetchone()
        if found is None:
            raise JobNotFound(f"no job with id {job_id} in schema {self.schema}")
        return job_from_record(found)

    def emit_event(
        self, name: str, payload: Any = None, *, connection: psycopg.Connection[Any] | None = None
    ) -> int:
        """Emit event `name` (as `Queue.emit_event`): the jobs waiting for it become
        runnable in this call's transaction; a job that waits later gets it at once.

        >>> queue.emit_event("payment:42", {"amount": 1200})

        Args:
            name: the event's name.
            payload: a JSON value for the waiters (default None).
            connection: a psycopg connection of yours: the emit commits with your
                transaction (default None: the queue's own, committed at once).

        Returns:
            How many waiting jobs it woke.

        Raises:
            ValueError: `name` is empty.
            TypeError: `payload` cannot be stored as JSON.
            SchemaError: the schema is missing or outdated.
            ConfigurationError: no database given or set, or it cannot be reached.
        """
        name, text = event_arguments(name, payload)
        with self._connection(connection) as conn:
            row = self._fetchone(conn, "emit_event", _params(name, text))
        assert row is not None  # a function call: one row
        return int(row[0])

    # -- connections -------------------------------------------------------------

    def close(self) -> None:
        """Close the queue's own connection (a caller's connection stays the caller's)."""
        with self._lock:
            own, self._own = self._own, None
        if own is not None:
            own.close()

    def __enter__(self) -> SyncQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def _connection(
        self, connection: psycopg.Connection[Any] | None
    ) -> Iterator[psycopg.Connection[Any]]:
        if connection is not None:
            yield connection
            return
        with self._lock:
            own = self._own
            if own is None or own.closed or own.broken:
                own = self._own = self._connect()
            yield own

    def _connect(self) -> psycopg.Connection[Any]:
        driver = _psycopg()
        dsn = self._dsn or resolve_dsn()
        if dsn is None:
            raise ConfigurationError(
                "no database given: pass SyncQueue(dsn), or set AIOPGQ_DSN (or DATABASE_URL)"
            )
        try:
            conn: psycopg.Connection[Any] = driver.connect(
                check_dsn(dsn), autocommit=True, **self._connect_kwargs
            )
        except driver.OperationalError as exc:
            raise ConfigurationError(
                f"cannot connect to {redact(dsn)} ({redact(str(exc).strip())}): is the server "
                "running, and the address right?"
            ) from None
        # psycopg prepares a statement run 5 times on a connection; behind a pooler in
        # transaction mode the next run may land where it is unknown (pooler.py).
        if "prepare_threshold" not in self._connect_kwargs:
            pid = conn.info.backend_pid
            if conn.execute(same_process_query(pid)).fetchone() is None:
                conn.prepare_threshold = None
        return conn

    def _fetchone(
        self, conn: psycopg.Connection[Any], name: str, params: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        with _schema_errors(self.schema):
            return conn.execute(self._sql[name], params).fetchone()

    def _declared(self, task: str, conn: psycopg.Connection[Any]) -> Declaration | None:
        """The registry's declaration of a task not registered with this SyncQueue."""
        cache = self._registry
        if cache.needs_read(task):
            from psycopg.rows import dict_row

            with _schema_errors(self.schema):
                rows = conn.cursor(row_factory=dict_row).execute(self._sql["registered_tasks"])
                cache.update(rows.fetchall())
        return cache.resolve(task)


def _params(*values: Any) -> dict[str, Any]:
    """Positional values as the named parameters of for_psycopg() statements."""
    return {f"p{number}": value for number, value in enumerate(values, 1)}


@contextlib.contextmanager
def _schema_errors(schema: str) -> Iterator[None]:
    """PostgreSQL's "no such table/function" as a SchemaError that says what to do."""
    from psycopg import errors

    try:
        yield
    except (errors.UndefinedTable, errors.UndefinedFunction, errors.InvalidSchemaName) as exc:
        raise SchemaError(
            f"schema {schema} is missing or outdated ({exc}): run `aiopgq migrate`"
        ) from exc


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ConfigurationError(
            f"SyncQueue needs psycopg 3 ({exc}): pip install -e '.[sync]' in the aiopgq clone"
        ) from None
    return psycopg
