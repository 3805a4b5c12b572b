"""Enqueuing: Queue.enqueue, enqueue_many and copy_many, from checked options to a row.

Each call takes one of three paths: plain (one statement, the hot path), observed
(the same statement inside the observers' span, with the trace context stored), or
keyed (idempotency keys: sql/enqueue_unique.sql via the Unique mixin).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from ._db.connection import Connection
from ._db.migrations import missing_schema_as_error
from ._enqueue import (
    Batch,
    OnConflict,
    TaskDefaults,
    copy_batch,
    insert_batch,
    insert_job,
    make_batch,
    resolve_options,
)
from ._errors import PayloadTooLarge
from ._hooks import Hooks
from ._job import Job, build_job
from ._observer import observe_enqueue
from ._payload import encode_payload
from ._registry import RegistryLookup
from ._results import Results
from ._unique import Unique, uniqueness


@contextlib.contextmanager
def payload_limit_as_error(schema: str, task: str) -> Iterator[None]:
    """The database's payload size limit (migration 0020) as a PayloadTooLarge that says
    what to do; it holds for every path, Python's max_payload_bytes only for this one."""
    try:
        yield
    except asyncpg.CheckViolationError as exc:
        if exc.constraint_name != "jobs_payload_max_bytes":
            raise
        raise PayloadTooLarge(
            f"task {task}: the database refused the payload: it is over the size limit of "
            f"schema {schema} (constraint jobs_payload_max_bytes; SELECT "
            f"{schema}.max_payload_bytes() shows it in bytes); store large data elsewhere "
            f"and pass a reference, or have the schema's owner raise it with SELECT "
            f"{schema}.set_max_payload_bytes(n)"
        ) from None


class Enqueuing(RegistryLookup, Unique, Hooks, Results):
    """The Jobs it returns can be awaited (Results: job.wait()), and the enqueue hooks
    (Hooks) see them."""

    max_payload_bytes: int

    async def enqueue(
        self,
        task: str,
        payload: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: Connection | None = None,
        idempotency_key: str | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> Job:
        """Enqueue a job by task name. Defaults and argument checks come from the task if
        registered here, else from the registry workers keep (TaskNotFound for a name
        no worker registered, while some registered others), else queue "default".
        With an `idempotency_key`, a job already holding the key is returned instead
        (README "Unique jobs" for `on_conflict` and `unique_for`). `concurrency_key`
        is the job's key for its queue's per-key limit (`Queue.configure`).

        >>> await queue.enqueue("demo.add", {"a": 1, "b": 2}, delay=5)
        >>> await queue.enqueue("demo.add", {"a": 1, "b": 2}, idempotency_key="add-1-2")

        `enqueue_retry_for` waits out an unreachable database for this call (README,
        "Producers during an outage"); the queue's `enqueue_retry_for` when None.
        """
        known = self.tasks.get(task)
        defaults: TaskDefaults | None = known
        if known is not None:
            if payload is not None:
                payload = known.bind((), payload)  # same checks as known.enqueue()
        else:  # not registered here: the registry's declaration, if any
            defaults = await self._declared(task, connection, enqueue_retry_for)
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
            concurrency_key=concurrency_key,
        )
        keys = None if idempotency_key is None else [idempotency_key]
        unique = uniqueness(keys, 1, unique_for, on_conflict)
        if unique is not None:
            with payload_limit_as_error(self.schema, task):
                jobs, _ = await self._enqueue_unique(
                    task, [arguments], f"[{text}]", opts, unique, connection, enqueue_retry_for
                )
            return (await self._after_enqueue(jobs, owned=False))[0]
        with missing_schema_as_error(self.schema), payload_limit_as_error(self.schema, task):
            if self._observer is None:
                row = await self._run(
                    connection,
                    lambda conn: insert_job(conn, self.sql, task, text, opts),
                    enqueue_retry_for,
                )
            else:
                with observe_enqueue(self._observer, task, opts.queue, 1) as seen:
                    row = await self._run(
                        connection,
                        lambda conn: insert_job(conn, self.sql, task, text, opts, seen.trace),
                        enqueue_retry_for,
                    )
                    seen.job_ids = [row[0]]
        job = build_job(
            id=row[0],
            task=task,
            queue=opts.queue,
            payload=arguments,
            priority=opts.priority,
            run_at=row[1],
            created_at=row[2],
            max_attempts=opts.max_attempts,
            _owner=self,  # Job.wait() waits here (_results.py)
        )
        if self._enqueue_hooks:
            await self._enqueued([job])
        return job

    async def enqueue_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: Connection | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> list[Job]:
        """Enqueue one job per payload in a single statement (one round trip).

        `idempotency_keys` has one key (or None) per payload; a payload whose key is held
        gets the holder's Job back, in its place.

        >>> jobs = await queue.enqueue_many("demo.add", [{"a": 1, "b": 2}] * 1000)
        >>> jobs = await queue.enqueue_many("demo.add", payloads, idempotency_keys=keys)
        """
        batch = await self._checked_batch(
            task,
            payloads,
            queue,
            run_at,
            delay,
            priority,
            max_attempts,
            connection,
            concurrency_key,
            enqueue_retry_for,
        )
        unique = uniqueness(idempotency_keys, len(batch.payloads), unique_for, on_conflict)
        if not batch.payloads:
            self._check_open(connection)  # an empty batch on a closed queue fails like any
            return []
        if unique is not None:
            with payload_limit_as_error(self.schema, task):
                jobs, _ = await self._enqueue_unique(
                    task,
                    batch.payloads,
                    batch.as_array(),
                    batch.options,
                    unique,
                    connection,
                    enqueue_retry_for,
                )
            return await self._after_enqueue(jobs, owned=False)
        with missing_schema_as_error(self.schema), payload_limit_as_error(self.schema, task):
            if self._observer is None:
                jobs = await self._run(
                    connection,
                    lambda conn: insert_batch(conn, self.sql, batch, owner=self),
                    enqueue_retry_for,
                )
            else:
                count = len(batch.payloads)
                with observe_enqueue(self._observer, task, batch.options.queue, count) as seen:
                    jobs = await self._run(
                        connection,
                        lambda conn: insert_batch(conn, self.sql, batch, seen.trace, self),
                        enqueue_retry_for,
                    )
                    seen.job_ids = [job.id for job in jobs]
        if self._enqueue_hooks:
            await self._enqueued(jobs)
        return jobs

    async def copy_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: Connection | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> int:
        """Enqueue with COPY (no JSON parsing on the server); returns the count, no ids.

        With `idempotency_keys` the rows go through the keyed insert of enqueue_many
        (COPY cannot skip a held key) and the count is of the jobs it created.

        >>> await queue.copy_many("demo.add", ({"a": i, "b": i} for i in range(100_000)))
        """
        batch = await self._checked_batch(
            task,
            payloads,
            queue,
            run_at,
            delay,
            priority,
            max_attempts,
            connection,
            concurrency_key,
            enqueue_retry_for,
        )
        unique = uniqueness(idempotency_keys, len(batch.payloads), unique_for, on_conflict)
        if not batch.payloads:
            self._check_open(connection)
            return 0
        if unique is not None:
            with payload_limit_as_error(self.schema, task):
                _, created = await self._enqueue_unique(
                    task,
                    batch.payloads,
                    batch.as_array(),
                    batch.options,
                    unique,
                    connection,
                    enqueue_retry_for,
                )
            return created
        with missing_schema_as_error(self.schema), payload_limit_as_error(self.schema, task):
            if self._observer is None:
                return await self._run(
                    connection, lambda conn: copy_batch(conn, self.schema, batch), enqueue_retry_for
                )
            count = len(batch.payloads)
            with observe_enqueue(self._observer, task, batch.options.queue, count) as seen:
                return await self._run(
                    connection,
                    lambda conn: copy_batch(conn, self.schema, batch, seen.trace),
                    enqueue_retry_for,
                )

    async def _after_enqueue(self, jobs: list[Job], *, owned: bool) -> list[Job]:
        """`jobs` made awaitable (unless they were built so) and shown to the hooks."""
        if not owned:
            for job in jobs:
                job.__dict__["_owner"] = self
        if self._enqueue_hooks:
            await self._enqueued(jobs)
        return jobs

    async def _checked_batch(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        queue: str | None,
        run_at: datetime | None,
        delay: timedelta | float | None,
        priority: int | None,
        max_attempts: int | None,
        connection: Connection | None,
        concurrency_key: str | None,
        retry_for: float | timedelta | None,
    ) -> Batch:
        """The payloads checked against the task here, else the registry's declaration."""
        known: TaskDefaults | None = self.tasks.get(task) or await self._declared(
            task, connection, retry_for
        )
        opts = resolve_options(
            known,
            queue=queue,
            run_at=run_at,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            concurrency_key=concurrency_key,
        )
        return make_batch(known, task, payloads, self.max_payload_bytes, opts)
