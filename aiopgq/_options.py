"""Enqueue options and batches: checked before anything is written."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol

import asyncpg

from ._db.connection import Connection
from ._db.statements import Statements
from ._models import Job, JobWaiter, build_jobs
from ._payload import encode_each_payload, encode_payloads

PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1

# What an enqueue with an idempotency key does when a job holds the key (aiopgq/_client/unique.py).
OnConflict = Literal["ignore", "replace", "raise"]
ON_CONFLICT: tuple[OnConflict, ...] = ("ignore", "replace", "raise")


class TaskDefaults(Protocol):
    """What enqueue needs of a task registered in this process (an aiopgq.Task)."""

    @property
    def queue_name(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def check_keywords(self) -> Callable[[Mapping[str, Any]], None]: ...


@dataclass
class Options:
    """Where and when jobs go: the call's options, else the task's, else the defaults."""

    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None  # None: now, by the server's clock
    concurrency_key: str | None = None  # the key of a queue's per-key limit


def resolve_options(
    known: TaskDefaults | None,
    *,
    queue: str | None,
    run_at: datetime | None,
    delay: timedelta | float | None,
    priority: int | None,
    max_attempts: int | None,
    concurrency_key: str | None = None,
) -> Options:
    """Checked options; `known` is the task if it is registered in this process."""
    return Options(
        queue=check_queue_name(queue or (known.queue_name if known else "default")),
        priority=check_priority(_or(priority, known.priority if known else 0)),
        max_attempts=check_max_attempts(_or(max_attempts, known.max_attempts if known else 5)),
        run_at=resolve_run_at(run_at, delay),
        concurrency_key=None if concurrency_key is None else check_key(concurrency_key),
    )


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
    owner: JobWaiter | None = None,
) -> list[Job]:
    """Insert every job of the batch in one statement (one JSON array parsed once);
    `trace`: the trace context to store with each (JSON text; tracing only); the Jobs'
    wait() waits on `owner`."""
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
    return build_jobs(
        ids,
        batch.payloads,
        task=batch.task,
        queue=opts.queue,
        priority=opts.priority,
        run_at=opts.run_at or created_at,
        created_at=created_at,
        max_attempts=opts.max_attempts,
        _owner=owner,  # a key of the fields every job copies: no work per job
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


def _or(value: int | None, fallback: int) -> int:
    return fallback if value is None else value


def resolve_run_at(run_at: datetime | None, delay: timedelta | float | None) -> datetime | None:
    """When the job may start; None means now (the server's clock)."""
    if run_at is not None and delay is not None:
        raise TypeError("pass run_at or delay, not both")
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not 0 <= seconds <= 10 * 365 * 86400:
            raise ValueError(f"delay must be between 0 and 10 years, got {seconds} s")
        return datetime.now(timezone.utc) + timedelta(seconds=seconds) if seconds else None
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise TypeError(f"run_at must be a datetime, got {type(run_at).__name__}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ValueError(
                "run_at is a naive datetime (no timezone), which would be read in the "
                "server's timezone: pass an aware one, e.g. datetime.now(timezone.utc)"
            )
    return run_at


def check_priority(priority: int) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must fit in 32 bits ({PRIORITY_MIN}..{PRIORITY_MAX})")
    return priority


def check_max_attempts(max_attempts: int) -> int:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
    return max_attempts


def check_key(key: str) -> str:
    if not isinstance(key, str) or not key or len(key) > 200 or "\x00" in key:
        raise ValueError(
            f"concurrency_key must be a non-empty string of at most 200 characters, got {key!r}"
        )
    return key


def check_queue_name(queue: str) -> str:
    if not isinstance(queue, str) or not queue or len(queue) > 200 or "\x00" in queue:
        raise ValueError(
            f"queue name must be a non-empty string of at most 200 characters, got {queue!r}"
        )
    return queue
