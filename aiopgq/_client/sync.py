"""SyncQueue: enqueue from code that is not asyncio (Django, Flask, scripts) with psycopg 3.

The same checks as Queue (aiopgq/_enqueue_options.py, _payload.py, the task registry), the same
statements (sql/, with psycopg's placeholders), and the same wake-up: the insert
trigger notifies the workers, at the commit of the caller's transaction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._db.dsn import check_dsn, redact, resolve_dsn
from .._db.statements import for_psycopg, render, statement_files, validate_identifier
from .._enqueue_options import TaskDefaults, resolve_options
from .._errors import ConfigurationError, JobNotFound, SchemaError
from .._models import Job, build_job, build_jobs, job_from_record
from .._payload import encode_payload
from .._task import Task
from .inserts import Batch, make_batch
from .queue import Queue
from .task_registry import Declaration, RegistryCache

if TYPE_CHECKING:
    import psycopg

_STATEMENTS = (
    "insert_job",
    "insert_jobs",
    "enqueue_keyed",
    "get_job",
    "registered_tasks",
)


class SyncQueue:
    """A producer for synchronous code: enqueue jobs with psycopg 3 (`aiopgq[sync]`).

    >>> queue = SyncQueue("postgresql://localhost/app")  # or SyncQueue.from_queue(queue)
    >>> job = queue.enqueue("mail.send", {"to": "a@example.com"}, connection=conn)

    With `connection=` (a psycopg connection) the job commits or rolls back with the
    caller's transaction; without, it is committed at once on the queue's own
    connection (opened on first use, one at a time across threads).
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
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: psycopg.Connection[Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Enqueue a job by task name, with Queue.enqueue's checks and defaults.

        >>> with conn.transaction():  # your psycopg connection
        ...     queue.enqueue("mail.send", {"to": "a@example.com"}, connection=conn)
        """
        with self._connection(connection) as conn:
            known = self.tasks.get(task)
            defaults: TaskDefaults | None = known
            if known is not None:
                if payload is not None:
                    payload = known.bind((), payload)  # as Task.enqueue checks it
            else:  # the registry's declaration, if any
                defaults = self._declared(task, conn)
                if defaults is not None:
                    defaults.check_keywords(payload or {})
            arguments = dict(payload or {})
            text = encode_payload(arguments, task, self.max_payload_bytes)
            opts = resolve_options(
                defaults,
                queue=queue,
                run_at=run_at,
                delay=delay,
                priority=priority,
                max_attempts=max_attempts,
            )
            values = (task, text, opts.queue, opts.priority, opts.run_at, opts.max_attempts)
            params = _params(*values)
            if idempotency_key is not None:  # the job holding the key, as it is stored
                keyed = self._fetchone(conn, "enqueue_keyed", _params(*values, idempotency_key))
                assert keyed is not None
                return self.get_job(keyed[0], connection=conn)
            row = self._fetchone(conn, "insert_job", params)
        assert row is not None
        return build_job(
            id=row[0],
            task=task,
            queue=opts.queue,
            payload=arguments,
            priority=opts.priority,
            run_at=row[1],
            created_at=row[2],
            max_attempts=opts.max_attempts,
        )

    def enqueue_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: psycopg.Connection[Any] | None = None,
    ) -> list[Job]:
        """Enqueue one job per payload in one statement.

        >>> jobs = queue.enqueue_many("mail.send", [{"to": "a"}, {"to": "b"}])
        """
        with self._connection(connection) as conn:
            defaults = self.tasks.get(task) or self._declared(task, conn)
            opts = resolve_options(
                defaults,
                queue=queue,
                run_at=run_at,
                delay=delay,
                priority=priority,
                max_attempts=max_attempts,
            )
            batch: Batch = make_batch(defaults, task, payloads, self.max_payload_bytes, opts)
            if not batch.payloads:
                return []
            params = _params(
                task, batch.as_array(), opts.queue, opts.priority, opts.run_at, opts.max_attempts
            )
            row = self._fetchone(conn, "insert_jobs", params)
        assert row is not None
        ids, created_at = row
        return build_jobs(
            ids,
            batch.payloads,
            task=task,
            queue=opts.queue,
            priority=opts.priority,
            run_at=opts.run_at or created_at,
            created_at=created_at,
            max_attempts=opts.max_attempts,
        )

    def get_job(self, job_id: int, *, connection: psycopg.Connection[Any] | None = None) -> Job:
        """The job's current row; raises JobNotFound.

        >>> queue.get_job(job.id).status
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
            return conn
        except driver.OperationalError as exc:
            raise ConfigurationError(
                f"cannot connect to {redact(dsn)} ({redact(str(exc).strip())}): is the server "
                "running, and the address right?"
            ) from None

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
            f"SyncQueue needs psycopg 3 ({exc}): pip install 'aiopgq[sync]'"
        ) from None
    return psycopg
