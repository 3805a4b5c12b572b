"""Enqueue: Queue.enqueue, enqueue_many and copy_many, from checked options to a row.

Each call takes one of three paths: plain (one statement, the hot path), observed
(the same statement inside the observers' span, with the trace context stored), or
keyed (idempotency keys: sql/enqueue/enqueue_unique.sql, aiopgq/_client/unique.py). A Task's
shortcuts come in with their arguments bound and checked (`known`): nothing is bound
twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import asyncpg

from .._db.connection import Connection
from .._db.migrations import missing_schema_as_error
from .._enqueue_options import (
    MANY_JOBS_OPTIONS,
    ONE_JOB_OPTIONS,
    EnqueueManyOptions,
    EnqueueOptions,
    Options,
    TaskDefaults,
    check_option_names,
)
from .._errors import PayloadTooLarge
from .._models import Job, JobStatus, build_job
from .._observer import ObservedEnqueue, Observer, observe_enqueue
from .core import Core
from .dependencies import link_jobs, refuse_without_ids
from .hooks import Hooks
from .inserts import Batch, copy_batch, insert_batch, insert_job
from .prepare import prepare_many, prepare_one
from .task_registry import Declaration
from .unique import Uniqueness, enqueue_unique


class Enqueue:
    """The enqueue paths of one Queue; the Jobs it returns wait on `waiter`."""

    def __init__(self, core: Core, hooks: Hooks, waiter: Any) -> None:
        self._core = core
        self._hooks = hooks
        self._waiter = waiter  # the Queue: Job.wait() waits there

    async def one(
        self,
        task: str,
        payload: Mapping[str, Any] | None,
        known: TaskDefaults | None,
        options: EnqueueOptions,
    ) -> Job:
        """One job of `task`; `known` is its Task when `payload` is already bound to it."""
        core = self._core
        if options:
            check_option_names(options, ONE_JOB_OPTIONS, "enqueue")
        connection = options.get("connection")
        retry_for = options.get("enqueue_retry_for")
        defaults: TaskDefaults | None = known or core.tasks.get(task)
        if defaults is None:  # not registered here: the registry's declaration, if any
            defaults = await self.declared(task, connection, retry_for)
        prepared = prepare_one(
            task,
            payload,
            defaults,
            options,
            options.get("idempotency_key"),
            core.max_payload_bytes,
            checked=known is not None,
        )
        arguments, text, opts = prepared.arguments, prepared.text, prepared.options
        unique = prepared.unique
        if unique is not None:
            with payload_limit_as_error(core.schema, task):
                jobs, _ = await enqueue_unique(
                    core,
                    task,
                    [arguments],
                    f"[{text}]",
                    opts,
                    unique,
                    connection,
                    retry_for,
                    self._waiter,
                )
            return (await self._after(jobs))[0]
        status = JobStatus.PENDING
        with missing_schema_as_error(core.schema), payload_limit_as_error(core.schema, task):
            if opts.linked:
                row, status = await self._one_with_parents(task, text, opts, connection, retry_for)
            elif core.observer is None:
                row = await core.run(
                    connection,
                    lambda conn: insert_job(conn, core.sql, task, text, opts),
                    retry_for,
                )
            else:
                with observe_enqueue(core.observer, task, opts.queue, 1) as seen:
                    row = await core.run(
                        connection,
                        lambda conn: insert_job(conn, core.sql, task, text, opts, seen.trace),
                        retry_for,
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
            concurrency_key=opts.concurrency_key,
            status=status,
            waiter=self._waiter,
        )
        if self._hooks.enqueue_hooks:
            await self._hooks.enqueued([job])
        return job

    async def _one_with_parents(
        self,
        task: str,
        text: str,
        opts: Options,
        connection: Connection | None,
        retry_for: float | timedelta | None,
    ) -> tuple[asyncpg.Record, JobStatus]:
        """Insert one job and give it its parents and sequence, in one transaction (inside
        the caller's, if it gives a connection): its row and its status."""
        core = self._core

        async def op(conn: Connection) -> tuple[asyncpg.Record, JobStatus]:
            async with conn.transaction():
                row = await insert_job(conn, core.sql, task, text, opts, seen.trace)
                return row, (await link_jobs(conn, core.sql, [row[0]], opts))[0]

        with _observed(core.observer, task, opts.queue, 1) as seen:
            row, status = await core.run(connection, op, retry_for)
            seen.job_ids = [row[0]]
        return row, status

    async def _many_with_parents(
        self,
        batch: Batch,
        connection: Connection | None,
        retry_for: float | timedelta | None,
    ) -> list[Job]:
        """Insert a batch and give its jobs their parents (the same for all) and their
        sequence (in order), in one transaction."""
        core = self._core
        opts = batch.options

        async def op(conn: Connection) -> list[Job]:
            async with conn.transaction():
                jobs = await insert_batch(conn, core.sql, batch, seen.trace, self._waiter)
                statuses = await link_jobs(conn, core.sql, [job.id for job in jobs], opts)
            return [
                job if status is JobStatus.PENDING else dataclasses.replace(job, status=status)
                for job, status in zip(jobs, statuses, strict=True)
            ]

        with _observed(core.observer, batch.task, opts.queue, len(batch.payloads)) as seen:
            jobs = await core.run(connection, op, retry_for)
            seen.job_ids = [job.id for job in jobs]
        return jobs

    async def many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        known: TaskDefaults | None,
        options: EnqueueManyOptions,
    ) -> list[Job]:
        """One job per payload in a single statement (one round trip)."""
        core = self._core
        batch, unique = await self._prepared(task, payloads, known, options, "enqueue_many")
        connection = options.get("connection")
        retry_for = options.get("enqueue_retry_for")
        if not batch.payloads:
            core.check_open(connection)  # an empty batch on a closed queue fails like any
            return []
        if unique is not None:
            jobs, _ = await self._keyed(batch, unique, connection, retry_for)
            return await self._after(jobs)
        with missing_schema_as_error(core.schema), payload_limit_as_error(core.schema, task):
            if batch.options.linked:
                jobs = await self._many_with_parents(batch, connection, retry_for)
            elif core.observer is None:
                jobs = await core.run(
                    connection,
                    lambda conn: insert_batch(conn, core.sql, batch, waiter=self._waiter),
                    retry_for,
                )
            else:
                count = len(batch.payloads)
                with observe_enqueue(core.observer, task, batch.options.queue, count) as seen:
                    jobs = await core.run(
                        connection,
                        lambda conn: insert_batch(conn, core.sql, batch, seen.trace, self._waiter),
                        retry_for,
                    )
                    seen.job_ids = [job.id for job in jobs]
        if self._hooks.enqueue_hooks:
            await self._hooks.enqueued(jobs)
        return jobs

    async def copy(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        known: TaskDefaults | None,
        options: EnqueueManyOptions,
    ) -> int:
        """COPY the jobs in (no JSON parsing on the server); the count of new jobs."""
        core = self._core
        batch, unique = await self._prepared(task, payloads, known, options, "copy_many")
        refuse_without_ids(batch.options, "copy_many")
        connection = options.get("connection")
        retry_for = options.get("enqueue_retry_for")
        if not batch.payloads:
            core.check_open(connection)
            return 0
        if unique is not None:
            return (await self._keyed(batch, unique, connection, retry_for))[1]
        with missing_schema_as_error(core.schema), payload_limit_as_error(core.schema, task):
            if core.observer is None:
                return await core.run(
                    connection, lambda conn: copy_batch(conn, core.schema, batch), retry_for
                )
            count = len(batch.payloads)
            with observe_enqueue(core.observer, task, batch.options.queue, count) as seen:
                return await core.run(
                    connection,
                    lambda conn: copy_batch(conn, core.schema, batch, seen.trace),
                    retry_for,
                )

    async def declared(
        self, task: str, connection: Connection | None, retry_for: float | timedelta | None
    ) -> Declaration | None:
        """The registry's declaration of `task`, read when the cache says so: at most one
        read at a time, on the caller's connection when it gives one (the read joins its
        transaction harmlessly)."""
        core = self._core
        cache = core.registry
        if cache.needs_read(task):
            if core.registry_lock is None:
                core.registry_lock = asyncio.Lock()
            async with core.registry_lock:
                if cache.needs_read(task):  # not read meanwhile by a concurrent enqueue
                    with missing_schema_as_error(core.schema):
                        rows = await core.run(  # a read: safe to send again
                            connection,
                            lambda conn: conn.fetch(core.sql.registered_tasks),
                            retry_for,
                            idempotent=True,
                        )
                        cache.update(rows)
        return cache.resolve(task)

    async def _prepared(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        known: TaskDefaults | None,
        options: EnqueueManyOptions,
        call: str,
    ) -> tuple[Batch, Uniqueness | None]:
        """The payloads checked against the task here, else the registry's declaration,
        and the call's uniqueness (None without keys)."""
        if options:
            check_option_names(options, MANY_JOBS_OPTIONS, call)
        core = self._core
        if known is None:
            known = core.tasks.get(task) or await self.declared(
                task, options.get("connection"), options.get("enqueue_retry_for")
            )
        batch, unique = prepare_many(
            task, payloads, known, options, options.get("idempotency_keys"), core.max_payload_bytes
        )
        return batch, unique

    async def _keyed(
        self,
        batch: Batch,
        unique: Uniqueness,
        connection: Connection | None,
        retry_for: float | timedelta | None,
    ) -> tuple[list[Job], int]:
        """A batch with idempotency keys, through enqueue_unique(): its Jobs, how many new."""
        with payload_limit_as_error(self._core.schema, batch.task):
            return await enqueue_unique(
                self._core,
                batch.task,
                batch.payloads,
                batch.as_array(),
                batch.options,
                unique,
                connection,
                retry_for,
                self._waiter,
            )

    async def _after(self, jobs: list[Job]) -> list[Job]:
        """Keyed jobs shown to the hooks."""
        if self._hooks.enqueue_hooks:
            await self._hooks.enqueued(jobs)
        return jobs


def _observed(
    observer: Observer | None, task: str, queue: str, count: int
) -> contextlib.AbstractContextManager[ObservedEnqueue]:
    """The observers' span around an enqueue, or nothing (no trace) without observers."""
    if observer is None:
        return contextlib.nullcontext(ObservedEnqueue(None))
    return observe_enqueue(observer, task, queue, count)


@contextlib.contextmanager
def payload_limit_as_error(schema: str, task: str) -> Iterator[None]:
    """The database's payload size limit (the insert trigger's jobs_payload_max_bytes) as a
    PayloadTooLarge that says what to do; it holds for every path into the table, Python's
    max_payload_bytes only for this one."""
    try:
        yield
    except asyncpg.CheckViolationError as exc:
        if exc.constraint_name != "jobs_payload_max_bytes":
            raise
        raise PayloadTooLarge(
            f"task {task}: the database refused the payload: it is over the size limit of "
            f"schema {schema} (jobs_payload_max_bytes; SELECT "
            f"{schema}.max_payload_bytes() shows it in bytes); store large data elsewhere "
            f"and pass a reference, or have the schema's owner raise it with SELECT "
            f"{schema}.set_max_payload_bytes(n)"
        ) from None
