"""Inserts: the rows of an enqueue written in one statement (plain, bulk JSON, or COPY)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from .._db.connection import Connection
from .._db.statements import Statements
from .._enqueue_options import Options, TaskDefaults
from .._models import Job, JobStatus, JobWaiter, build_jobs
from .._payload import encode_each_payload, encode_payloads


@dataclass
class Batch:
    task: str
    payloads: list[dict[str, Any]]
    options: Options
    max_payload_bytes: int

    def as_array(self) -> str:
        """The payloads as one JSON array (enqueue_many: one parse on the server)."""
        return encode_payloads(self.payloads, self.task, self.max_payload_bytes)

    def each(self) -> list[str]:
        """Each payload's JSON text (COPY: one value per row)."""
        return encode_each_payload(self.payloads, self.task, self.max_payload_bytes)


def make_batch(
    known: TaskDefaults | None,
    task: str,
    payloads: Iterable[Mapping[str, Any]],
    max_payload_bytes: int,
    options: Options,
) -> Batch:
    """Payloads of a bulk enqueue, checked against the task's signature (the TypeError
    names the item at fault by its index: "item 3: task x: missing ..."); their JSON is
    checked when encoded (as_array or each)."""
    payload_list: list[dict[str, Any]] = []
    append = payload_list.append
    items = iter(payloads)  # not iterable: TypeError as is
    try:
        for item in items:
            append(dict(item))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"item {len(payload_list)}: expected a dict of the task's arguments ({exc})"
        ) from None
    if known is not None:
        check = known.check_keywords
        try:
            for arguments in payload_list:
                check(arguments)
        except TypeError as exc:
            # The first equal dict is the one at fault: the check reads only the keys.
            raise TypeError(f"item {payload_list.index(arguments)}: {exc}") from None
    return Batch(task, payload_list, options, max_payload_bytes)


async def insert_job(
    conn: Connection,
    sql: Statements,
    task: str,
    payload_text: str,
    opts: Options,
    trace: str | None = None,
) -> asyncpg.Record:
    """Insert one job without an idempotency key; its row (id, run_at, created_at).
    `trace`: the trace context to store (JSON text; tracing only)."""
    args: tuple[Any, ...] = (
        task,
        payload_text,
        opts.queue,
        opts.priority,
        opts.run_at,
        opts.max_attempts,
    )
    statement = sql.insert_job
    if opts.concurrency_key is not None:  # its own statement: unkeyed jobs bind nothing more
        statement, args = sql.insert_job_keyed, (*args, opts.concurrency_key, trace)
    elif trace is not None:
        statement, args = sql.insert_job_traced, (*args, trace)
    row: asyncpg.Record | None = await conn.fetchrow(statement, *args)
    assert row is not None
    return row


async def insert_batch(
    conn: Connection,
    sql: Statements,
    batch: Batch,
    trace: str | None = None,
    waiter: JobWaiter | None = None,
) -> list[Job]:
    """Insert every job of the batch in one statement (one JSON array parsed once);
    `trace`: the trace context to store with each (JSON text; tracing only); the Jobs'
    wait() waits on `waiter`."""
    opts = batch.options
    args: tuple[Any, ...] = (
        batch.task,
        batch.as_array(),
        opts.queue,
        opts.priority,
        opts.run_at,
        opts.max_attempts,
    )
    if opts.concurrency_key is not None:
        row = await conn.fetchrow(sql.insert_jobs_keyed, *args, opts.concurrency_key, trace)
    elif trace is None:
        row = await conn.fetchrow(sql.insert_jobs, *args)
    else:
        row = await conn.fetchrow(sql.insert_jobs_traced, *args, trace)
    assert row is not None  # an aggregate: always one row
    ids, created_at = row
    return batch_jobs(batch, ids, created_at, waiter)


def batch_jobs(
    batch: Batch,
    ids: Sequence[int],
    created_at: datetime,
    waiter: JobWaiter | None = None,
    status: JobStatus = JobStatus.PENDING,
) -> list[Job]:
    """The Jobs of a batch the bulk insert made (its ids and created_at): for Queue and
    SyncQueue alike; `waiter`: where their wait() waits; `status`: theirs (jobs with
    parents may be waiting)."""
    opts = batch.options
    return build_jobs(
        ids,
        batch.payloads,
        task=batch.task,
        queue=opts.queue,
        priority=opts.priority,
        run_at=opts.run_at or created_at,
        created_at=created_at,
        max_attempts=opts.max_attempts,
        concurrency_key=opts.concurrency_key,
        status=status,
        waiter=waiter,  # a key of the fields every job copies: no work per job
    )


async def copy_batch(conn: Connection, schema: str, batch: Batch, trace: str | None = None) -> int:
    """COPY the batch into the jobs table (no JSON parsing on the server); the count.
    `trace`: the trace context to store with each (JSON text; tracing only)."""
    opts = batch.options
    columns = ["task", "payload", "queue", "priority", "max_attempts"]
    common: tuple[Any, ...] = (opts.queue, opts.priority, opts.max_attempts)
    if opts.run_at is not None:
        columns.append("run_at")
        common += (opts.run_at,)
    if opts.concurrency_key is not None:
        columns.append("concurrency_key")
        common += (opts.concurrency_key,)
    if trace is not None:
        columns.append("trace_context")
        common += (trace,)
    texts = batch.each()
    task = batch.task
    # No wake_once() first: its transaction and round trips cost more than the
    # trigger's per-row lock calls they would save.
    await conn.copy_records_to_table(
        "jobs",
        records=[(task, text, *common) for text in texts],
        columns=columns,
        schema_name=schema,
    )
    return len(texts)
