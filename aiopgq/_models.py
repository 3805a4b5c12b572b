"""The model: jobs, queue statistics, limits and archive layout as the user sees them, and
every way a row becomes a Job."""

from __future__ import annotations

import contextvars
import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Protocol

import asyncpg

from ._payload import decode_payload


class JobStatus(str, enum.Enum):
    """Where a job is in its life: pending -> running -> done / failed / cancelled; a job
    enqueued with depends_on= is waiting until its parents are done, then pending."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING = "waiting"


@dataclass(frozen=True)
class JobError:
    """One failed attempt in a job's history (`Job.errors`, oldest first, the last 10).

    >>> for error in (await queue.get_job(job_id)).errors:
    ...     print(error.at, error.attempt, error.worker, error.error.splitlines()[-1])

    Attributes:
        at: when the attempt failed (an aware datetime).
        attempt: the number of the attempt, from 1.
        worker: the id of the worker that ran it (None when unknown).
        error: the exception's type, message and traceback (capped in length).
    """

    at: datetime
    attempt: int
    worker: str | None
    error: str  # exception type, message and traceback (capped in length)


@dataclass(frozen=True)
class JobEvent:
    """A snooze or an abort in a job's history (`Job.history`, oldest first, the last 20).

    >>> [(e.event, e.attempt, e.seconds or e.reason) for e in job.history]

    Attributes:
        event: "snooze" or "abort".
        at: when it happened (an aware datetime).
        attempt: the attempt that snoozed or aborted, from 1.
        worker: the id of the worker that ran it (None when unknown).
        seconds: a snooze's delay in seconds (None for an abort).
        reason: an abort's reason (None for a snooze).
        over_limit: True for a snooze past the task's max_snoozes, counted as a failed attempt.
    """

    event: str  # "snooze" or "abort"
    at: datetime
    attempt: int
    worker: str | None
    seconds: float | None = None  # a snooze's delay
    reason: str | None = None  # an abort's reason
    over_limit: bool = False  # a snooze past max_snoozes, counted as a failed attempt


class JobWaiter(Protocol):
    """Where Job.wait() waits: the aiopgq.Queue that returned the Job."""

    async def wait_for_job(self, job_id: int, timeout: float | None) -> Job: ...


@dataclass(frozen=True)
class Job:
    """A job row.

    >>> job = await add.enqueue(1, b=2)
    >>> (await queue.get_job(job.id)).status

    Attributes:
        id: the job's id, unique in its schema.
        task: the name of its task.
        queue: the name of its queue.
        payload: the handler's keyword arguments, as JSON decoded.
        priority: higher runs first among runnable jobs of the queue (a 32-bit int).
        run_at: when it may run next (an aware datetime: enqueue's, a retry's or a snooze's).
        created_at: when it was enqueued (an aware datetime, the database's clock).
        status: where it is in its life (default pending).
        attempts: the attempts started so far (snoozes and releases at shutdown do not count).
        max_attempts: the most attempts it may make (default 1 for a Job built by hand).
        last_error: the last failed attempt's error (type, message, traceback) or abort
            reason; None when none failed.
        result: what the handler returned, as JSON decoded, once done (else None).
        locked_by: the id of the worker running it (None when it is not running).
        heartbeat_at: when its worker last extended its lease (None when not running).
        finished_at: when it ended: done, failed or cancelled (None before).
        errors: its failed attempts, oldest first (the last 10).
        tick: a periodic job's schedule time (None for other jobs).
        progress: the fraction (0 to 1) its handler last reported with `ctx.progress`, or None.
        checkpoint: the state its handler last saved with `ctx.progress(state=...)`, or None.
        history: its snoozes and aborts, oldest first (the last 20).
        concurrency_key: its key for its queue's per-key limit (None: no key).
        waiter: the Queue that returned this Job, where `wait()` waits (None for a Job
            unpickled, copied or built by hand).
    """

    id: int
    task: str
    queue: str
    payload: dict[str, Any]
    priority: int
    run_at: datetime
    created_at: datetime
    status: JobStatus = JobStatus.PENDING
    attempts: int = 0
    max_attempts: int = 1
    last_error: str | None = None
    result: Any = None
    locked_by: str | None = None
    heartbeat_at: datetime | None = None
    finished_at: datetime | None = None
    errors: tuple[JobError, ...] = ()
    tick: datetime | None = None  # a periodic job's schedule time
    progress: float | None = None
    checkpoint: Any = None
    history: tuple[JobEvent, ...] = ()
    concurrency_key: str | None = None  # the job's key for its queue's per-key limit
    # The Queue that returned this Job (enqueue, get_job, list_jobs): what wait() waits on.
    # None for a Job made elsewhere (unpickled, copied, or built by hand).
    waiter: JobWaiter | None = field(default=None, repr=False, compare=False)

    async def wait(self, timeout: float | None = None) -> Job:
        """Wait until the job has ended and return it as it ended (`result` holds the
        handler's return value). For Jobs returned by enqueue and get_job.

        >>> job = await add.enqueue(1, b=2)
        >>> (await job.wait(timeout=30)).result

        Args:
            timeout: the longest wait, in seconds (default None: no limit).

        Returns:
            The job as it ended, done.

        Raises:
            JobFailed: the job ended failed.
            JobCancelled: the job ended cancelled.
            JobNotFound: no job has this id any more (pruned after its retention).
            TimeoutError: the job did not end within `timeout` seconds.
            QueueNotOpen: the Queue that returned the job is closed.
            RuntimeError: the Job was not returned by a Queue (built by hand, unpickled).
        """
        waiter = self.waiter
        if waiter is None:
            raise RuntimeError(
                f"job {self.id} was not returned by a Queue's enqueue or get_job, so it "
                f"knows no queue to wait on: use `await queue.result({self.id})`"
            )
        return await waiter.wait_for_job(self.id, timeout)

    def __getstate__(self) -> dict[str, Any]:
        # A pickled or copied Job leaves its queue (and the queue's pool) behind.
        return {**self.__dict__, "waiter": None}


@dataclass(frozen=True)
class QueueStats:
    """One queue now, and what went through it in the last `window` seconds (inf: every
    job retained): the one summary that Queue.queue_stats and status, `aiopgq status` and
    `top`, the dashboard and the workers' /metrics all read (sql/read/queue_stats.sql).

    >>> for q in await queue.queue_stats(window=60):
    ...     print(q.queue, q.runnable, q.running, f"{q.rate_in:.1f}/s", q.paused)

    Attributes:
        queue: the queue's name.
        runnable: pending jobs whose run_at has come.
        scheduled: pending jobs due later.
        running: jobs running now.
        arrived: jobs enqueued in the window (and not pruned since).
        done: jobs that finished done in the window.
        failed: jobs that ended failed in the window.
        cancelled: jobs cancelled in the window.
        oldest_runnable_age: seconds the oldest runnable job has waited (None: none waits).
        paused: True while the queue is paused.
        window: the window's length in seconds (inf: every job retained).
        progress: the mean progress (0 to 1) of the running jobs that report it, or None.
        waiting: jobs waiting for their parents (enqueued with depends_on=).
    """

    queue: str
    runnable: int  # pending jobs whose run_at has come
    scheduled: int  # pending jobs due later
    running: int
    arrived: int  # jobs enqueued in the window (and not pruned since)
    done: int  # jobs that finished in the window, by outcome
    failed: int
    cancelled: int
    oldest_runnable_age: float | None  # seconds the oldest runnable job has waited
    paused: bool
    window: float
    progress: float | None = None  # the mean progress of the running jobs that report it
    waiting: int = 0  # jobs waiting for their parents (depends_on)

    @classmethod
    def of(cls, row: Mapping[str, Any] | asyncpg.Record, window: float) -> QueueStats:
        """A row of sql/read/queue_stats.sql read over `window` seconds.

        Args:
            row: the row, its columns named as this class's fields but `window`.
            window: the window's length in seconds.

        Returns:
            The row's QueueStats.
        """
        return cls(**dict(row), window=window)

    @property
    def rate_in(self) -> float:
        """Jobs enqueued per second over the window."""
        return self.arrived / self.window

    @property
    def rate_out(self) -> float:
        """Jobs finished (done, failed or cancelled) per second over the window."""
        return (self.done + self.failed + self.cancelled) / self.window


@dataclass(frozen=True)
class QueueSettings:
    """The limits of one queue, across every worker (None: no such limit).

    >>> settings = await queue.configure("exports", concurrency=3)
    >>> settings.concurrency

    Attributes:
        queue: the queue's name.
        concurrency: the most jobs of the queue that run at once.
        rate: job starts per second, on average.
        burst: the most job starts at once above the rate (a token bucket's size).
        key_concurrency: the most running jobs per `concurrency_key`.
    """

    queue: str
    concurrency: int | None = None
    rate: float | None = None
    burst: int | None = None
    key_concurrency: int | None = None

    @property
    def limited(self) -> bool:
        """True if workers claim this queue through its limits."""
        return any(v is not None for v in (self.concurrency, self.rate, self.key_concurrency))


@dataclass(frozen=True)
class ArchivePartition:
    """One partition of the archive: finished jobs of one status, by finished_at.

    Attributes:
        status: the status of its jobs: done, failed or cancelled.
        from_at: the start of its finished_at range, included (None: the first partition,
            from the beginning of time).
        to_at: the end of its finished_at range, excluded.
        name: the partition's table name.
        rows_estimate: its rows, from the table's statistics (-1 before its first ANALYZE).
        bytes: its size on disk with its indexes, in bytes.
    """

    status: str
    from_at: datetime | None  # None: the first one, from the beginning of time
    to_at: datetime
    name: str
    rows_estimate: int  # from the table's statistics; -1 before its first ANALYZE
    bytes: int


@dataclass(frozen=True)
class ArchiveLayout:
    """Whether finished jobs move to the partitioned archive, and its partitions.

    >>> layout = await queue.archive_layout()
    >>> layout.enabled, [p.name for p in layout.partitions]

    Attributes:
        enabled: True while finished jobs move to the archive.
        archive_after: seconds a finished job stays in the jobs table before it moves.
        partition_width: seconds of finished_at each partition holds.
        changed_at: when the layout's settings last changed.
        partitions: the archive's partitions, oldest first per status.
    """

    enabled: bool
    archive_after: float  # seconds a finished job stays in the jobs table
    partition_width: float  # seconds of finished_at per partition
    changed_at: datetime
    partitions: tuple[ArchivePartition, ...]


_DEFAULTS = {f.name: f.default for f in fields(Job) if f.default is not MISSING}


def job_fields(**common: Any) -> dict[str, Any]:
    """Every field's default, overridden by `common`: a template for jobs built in bulk."""
    return {**_DEFAULTS, **common}


def job_of(values: dict[str, Any]) -> Job:
    """The Job whose fields are `values` (all of them, and now owned by the Job), set
    without the frozen dataclass's per-field __setattr__: hot paths build many."""
    job = object.__new__(Job)
    object.__setattr__(job, "__dict__", values)  # Job is frozen: its own __setattr__ refuses
    return job


def build_job(**values: Any) -> Job:
    """A Job from some fields, the rest at their defaults."""
    return job_of(job_fields(**values))


def build_jobs(ids: Sequence[int], payloads: Sequence[dict[str, Any]], **common: Any) -> list[Job]:
    """Jobs that differ only in id and payload (a bulk enqueue): the shared fields are
    laid out once and each job's fields are a copy of them (a third of build_job's cost)."""
    copy_shared = job_fields(**common).copy

    def one(job_id: int, payload: dict[str, Any]) -> Job:
        values = copy_shared()
        values["id"] = job_id
        values["payload"] = payload
        return job_of(values)

    if len(ids) != len(payloads):
        raise RuntimeError(f"{len(ids)} ids returned for {len(payloads)} jobs")
    return list(map(one, ids, payloads))


def job_from_record(
    row: Mapping[str, Any] | asyncpg.Record, waiter: JobWaiter | None = None
) -> Job:
    """A Job from a row of sql/read/get_job.sql (payload, result, errors and metadata as JSON
    text); `waiter` is the queue its wait() waits on. A row without errors or metadata
    (enqueue_unique.sql: a producer may not read those columns) makes a Job without
    them."""
    text = row.get("metadata")
    metadata = {} if text is None else json.loads(text)
    job = build_job(
        id=row["id"],
        queue=row["queue"],
        task=row["task"],
        payload=json.loads(row["payload"]),
        status=JobStatus(row["status"]),
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        run_at=row["run_at"],
        locked_by=row["locked_by"],
        heartbeat_at=row["heartbeat_at"],
        last_error=row["last_error"],
        result=None if row["result"] is None else json.loads(row["result"]),
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        errors=errors_from_json(row.get("errors")),  # enqueue_unique's rows have none
        tick=row["tick"],
        progress=metadata.get("progress"),
        checkpoint=metadata.get("checkpoint"),
        history=history_of(metadata.get("history") or ()),
        concurrency_key=row.get("concurrency_key"),
        waiter=waiter,
    )
    return job


def history_of(entries: Sequence[Mapping[str, Any]]) -> tuple[JobEvent, ...]:
    """The history in a job's metadata (see sql/migrations/baseline_*.sql) as JobEvents."""
    return tuple(
        JobEvent(
            event=str(entry["event"]),
            at=datetime.fromtimestamp(float(entry["at"]), timezone.utc),
            attempt=int(entry["attempt"]),
            worker=entry.get("worker"),
            seconds=entry.get("seconds"),
            reason=entry.get("reason"),
            over_limit=bool(entry.get("over_limit", False)),
        )
        for entry in entries
    )


def errors_from_json(text: str | None) -> tuple[JobError, ...]:
    """The `errors` column (see sql/migrations/baseline_*.sql) as JobErrors."""
    if text is None:
        return ()
    return tuple(
        JobError(
            at=datetime.fromtimestamp(float(entry["at"]), timezone.utc),
            attempt=int(entry["attempt"]),
            worker=entry.get("worker"),
            error=str(entry["error"]),
        )
        for entry in json.loads(text)
    )


_CLAIMED = job_fields(status=JobStatus.RUNNING)  # the fields all claimed Jobs share


def job_from_claimed_row(
    row: asyncpg.Record | tuple[Any, ...], instants: dict[float, datetime]
) -> tuple[Job, str]:
    """A claimed row as a Job (payload still JSON text: decoding may fail per job).

    The row's timestamps are epoch seconds (see sql/claim/dequeue.sql); `instants` holds the
    datetimes already made for this batch: jobs enqueued together share their values.
    """
    job_id, queue, task, payload, priority, attempts, max_attempts, run_at, created_at = row
    # A copy of the shared fields, then one store per column: half the cost of
    # build_job's keyword arguments, once per claimed job.
    values = _CLAIMED.copy()
    values["id"] = job_id
    values["queue"] = queue
    values["task"] = task
    values["payload"] = {}
    values["priority"] = priority
    values["attempts"] = attempts
    values["max_attempts"] = max_attempts
    # Jobs enqueued together share their instants: a lookup, not a call, for most.
    values["run_at"] = instants.get(run_at) or _instant(run_at, instants)
    values["created_at"] = instants.get(created_at) or _instant(created_at, instants)
    job = object.__new__(Job)  # job_of(values), written out: once per claimed job
    object.__setattr__(job, "__dict__", values)
    return job, payload


def _instant(epoch: float, made: dict[float, datetime]) -> datetime:
    """The datetime asyncpg would have decoded (exact to the microsecond until 2106);
    `made` keeps those of the batch so far (jobs enqueued together share them)."""
    found = made.get(epoch)
    if found is None:
        if math.isinf(epoch):  # +-infinity, written by SQL: asyncpg's naive max and min
            found = datetime.max if epoch > 0 else datetime.min
        else:
            found = datetime.fromtimestamp(epoch, timezone.utc)
        made[epoch] = found
    return found


def claimed_job(row: asyncpg.Record | tuple[Any, ...], payload: Any = MISSING) -> Job:
    """The Job of a claimed row (sql/claim/dequeue.sql), its payload decoded (or the
    `payload` already decoded from it)."""
    job, text = job_from_claimed_row(row, {})
    decoded = decode_payload(text) if payload is MISSING else payload
    object.__setattr__(job, "payload", decoded)  # built by us, not yet shared
    return job


def as_job(value: Job | asyncpg.Record) -> Job:
    """A Job, or the claimed row of one as the dispatcher's plain lane keeps it (a Job
    is made of a row only when something asks for it: most jobs never do)."""
    return value if isinstance(value, Job) else claimed_job(value)


# The job current_job() returns: its Job, or the claimed row it is made of when asked.
_current_job: contextvars.ContextVar[Job | asyncpg.Record] = contextvars.ContextVar(
    "aiopgq_current_job"
)


def current_job() -> Job:
    """The job the calling handler is running (its id, attempt, queue...).

    >>> @queue.task()
    ... async def work() -> None: print(current_job().attempts)

    Returns:
        The Job as the worker claimed it (status running, `attempts` this run's).

    Raises:
        RuntimeError: called outside a handler that a worker runs.
    """
    try:
        value = _current_job.get()
    except LookupError:
        raise RuntimeError("current_job() is only available inside a running task") from None
    if isinstance(value, Job):
        return value
    job = claimed_job(value)
    _current_job.set(job)  # in the handler's own context: made once
    return job
