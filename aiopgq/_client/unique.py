"""Unique jobs: idempotency keys on every enqueue path, and what a duplicate does.

Keyed jobs go through one SQL function, enqueue_unique() (sql/functions/
enqueue_unique.sql), whatever the path (enqueue, enqueue_many, copy_many, the SQL
enqueue()): it inserts what it can in set-based statements and settles held keys one
at a time. Jobs without a key
never come here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg

from .._db.connection import Connection
from .._db.migrations import missing_schema_as_error
from .._enqueue_options import ON_CONFLICT, OnConflict, Options
from .._errors import Error, shown
from .._models import Job, JobStatus, JobWaiter, build_job, job_from_record
from .core import Core

MAX_KEY_BYTES = 1000  # a B-tree entry holds at most ~2,700 bytes; keys are names, not data
_KEY_INDEX = "jobs_idempotency_key_idx"


class DuplicateJob(Error):
    """An enqueue with on_conflict="raise" found its idempotency key held by `job`.

    >>> try: await add.enqueue(1, b=2, idempotency_key="k", on_conflict="raise")
    ... except DuplicateJob as exc: print(exc.job.id, exc.job.status)

    Args:
        message: what happened, naming the key.
        job: the job that holds the key, as `job`.
    """

    def __init__(self, message: str, job: Job) -> None:
        super().__init__(message)
        self.job = job


@dataclass(frozen=True)
class Uniqueness:
    """The keys of a keyed enqueue (one per payload, None for none) and its options."""

    keys: list[str | None]
    unique_for: timedelta | None
    on_conflict: OnConflict


def uniqueness(
    keys: Sequence[str | None] | None,
    count: int,
    unique_for: timedelta | float | None,
    on_conflict: str,
) -> Uniqueness | None:
    """The checked options of an enqueue of `count` jobs; None when it has no keys."""
    if keys is None:
        if unique_for is not None or on_conflict != "ignore":
            raise ValueError(
                "unique_for and on_conflict apply to jobs with an idempotency key: "
                "pass idempotency_key= (or idempotency_keys= for many jobs)"
            )
        return None
    if on_conflict not in ON_CONFLICT:
        raise ValueError(
            f"on_conflict must be one of {', '.join(map(repr, ON_CONFLICT))}, "
            f"got {shown(on_conflict)}"
        )
    if isinstance(keys, str):
        raise TypeError("idempotency_keys must be a list of keys (one per payload), not a str")
    key_list = list(keys)
    if len(key_list) != count:
        raise ValueError(
            f"{count} payloads but {len(key_list)} idempotency keys: pass one key (or None) "
            "per payload, in the same order"
        )
    for key in key_list:
        if key is not None:
            _check_key(key)
    return Uniqueness(key_list, _window(unique_for), on_conflict)


def _check_key(key: object) -> None:
    if not isinstance(key, str):
        raise TypeError(f"an idempotency key must be a str, got {type(key).__name__}")
    if "\x00" in key:
        raise ValueError("an idempotency key cannot contain a NUL character (\\x00)")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(
            f"idempotency key of {len(key.encode())} bytes is over the {MAX_KEY_BYTES}-byte "
            "limit: derive a short key, e.g. a hash of the long one"
        )


def _window(unique_for: timedelta | float | None) -> timedelta | None:
    if unique_for is None:
        return None
    if isinstance(unique_for, bool) or not isinstance(unique_for, (timedelta, int, float)):
        raise TypeError(
            f"unique_for must be a timedelta or seconds, got {type(unique_for).__name__}"
        )
    window = unique_for if isinstance(unique_for, timedelta) else timedelta(seconds=unique_for)
    if window <= timedelta(0):
        raise ValueError(f"unique_for must be positive, got {window}")
    return window


def _resendable(unique: Uniqueness) -> bool:
    """Sending this keyed insert again after its reply was lost cannot enqueue twice: every
    job has a key, and a held key returns its holder (on_conflict="ignore"; "raise" would
    fail on the first attempt's own job, "replace" would replace it)."""
    return unique.on_conflict == "ignore" and all(key is not None for key in unique.keys)


async def _insert_keyed(
    core: Core, conn: Connection, args: tuple[Any, ...], concurrency_key: str | None
) -> list[asyncpg.Record]:
    """The keyed insert; a concurrency key is set in the same transaction."""
    if concurrency_key is None:
        return await conn.fetch(core.sql.enqueue_unique, *args)
    async with conn.transaction():  # the key set before any claim can see the jobs
        rows = await conn.fetch(core.sql.enqueue_unique, *args)
        await conn.execute(
            core.sql.set_concurrency_key,
            [r["id"] for r in rows if r["outcome"] in ("inserted", "replaced")],
            concurrency_key,
        )
    return rows


async def enqueue_unique(
    core: Core,
    task: str,
    payloads: list[dict[str, Any]],
    array_text: str,
    opts: Options,
    unique: Uniqueness,
    connection: Connection | None,
    retry_for: float | timedelta | None = None,
    waiter: JobWaiter | None = None,
) -> tuple[list[Job], int]:
    """Enqueue keyed jobs; each payload's Job (new, or the holder of its key) and how
    many are new. Raises DuplicateJob for on_conflict="raise"."""
    args = unique_arguments(task, array_text, opts, unique)
    try:
        with missing_schema_as_error(core.schema):
            rows = await core.run(
                connection,
                lambda conn: _insert_keyed(core, conn, args, opts.concurrency_key),
                retry_for,
                idempotent=_resendable(unique),
            )
    except asyncpg.UniqueViolationError as exc:
        duplicate = duplicate_job(
            getattr(exc, "constraint_name", None),
            getattr(exc, "detail", None),
            getattr(exc, "message", None) or str(exc),
        )
        if duplicate is None:
            raise
        raise duplicate from None
    return unique_jobs(task, payloads, opts, rows, waiter)


def unique_arguments(
    task: str, array_text: str, opts: Options, unique: Uniqueness
) -> tuple[Any, ...]:
    """The arguments of sql/enqueue/enqueue_unique.sql, for Queue and SyncQueue alike."""
    return (
        task,
        array_text,
        unique.keys,
        opts.queue,
        opts.priority,
        opts.run_at,
        opts.max_attempts,
        unique.unique_for,
        unique.on_conflict,
    )


def unique_jobs(
    task: str,
    payloads: list[dict[str, Any]],
    opts: Options,
    rows: Sequence[Mapping[str, Any] | asyncpg.Record],
    waiter: JobWaiter | None = None,
) -> tuple[list[Job], int]:
    """Each payload's Job from enqueue_unique()'s rows (new, or the holder of its key), and
    how many are new: the same for Queue and SyncQueue; `waiter`: where their wait() waits."""
    jobs: list[Job | None] = [None] * len(payloads)
    created = 0
    replaced: dict[int, tuple[int, Job]] = {}  # by id: the last replacement, and its item
    for row in rows:
        at = row["ord"] - 1
        if row["outcome"] == "inserted":
            created += 1
            jobs[at] = build_job(
                id=row["id"],
                task=task,
                queue=opts.queue,
                payload=payloads[at],
                priority=opts.priority,
                run_at=row["run_at"],
                created_at=row["created_at"],
                max_attempts=opts.max_attempts,
                concurrency_key=opts.concurrency_key,
                waiter=waiter,
            )
        else:
            jobs[at] = job = job_from_record(row, waiter)
            if row["outcome"] == "replaced" and at >= replaced.get(job.id, (-1, job))[0]:
                replaced[job.id] = (at, job)
    if any(job is None for job in jobs):
        raise RuntimeError(f"enqueue_unique() answered {len(rows)} rows for {len(jobs)} jobs")
    # A job that a later item of the call replaced is returned as it ends up.
    done = [replaced[job.id][1] if job.id in replaced else job for job in jobs if job]
    return done, created


def duplicate_job(constraint: str | None, detail: str | None, message: str) -> DuplicateJob | None:
    """The DuplicateJob of a unique violation raised by enqueue_unique() with
    on_conflict="raise" (None for another violation): the holder is in its DETAIL."""
    holder = _holder_of(constraint, detail)
    if holder is None:
        return None
    return DuplicateJob(f"{message}; on_conflict='ignore' returns that job instead", holder)


def _holder_of(constraint: str | None, detail: str | None) -> Job | None:
    if constraint != _KEY_INDEX:
        return None
    try:
        row = json.loads(detail or "")
    except ValueError:
        return None
    if not isinstance(row, dict) or "id" not in row:
        return None

    def instant(name: str) -> datetime | None:
        epoch = row.get(name)
        return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)

    return build_job(
        id=row["id"],
        queue=row["queue"],
        task=row["task"],
        payload=row["payload"],
        status=JobStatus(row["status"]),
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        run_at=instant("run_at"),
        locked_by=row["locked_by"],
        heartbeat_at=instant("heartbeat_at"),
        last_error=row["last_error"],
        result=row["result"],
        created_at=instant("created_at"),
        finished_at=instant("finished_at"),
    )
