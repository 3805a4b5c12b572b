"""Enqueue options: their one definition (every enqueue path takes them), and their checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol, TypedDict

from ._db.connection import Connection
from ._errors import ConfigurationError, shown

PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1

# What an enqueue with an idempotency key does when a job holds the key (aiopgq/_client/unique.py).
OnConflict = Literal["ignore", "replace", "raise"]
ON_CONFLICT: tuple[OnConflict, ...] = ("ignore", "replace", "raise")

# What a parent that ends failed or cancelled does to a job that depends on it
# (sql/functions/dependencies.sql).
OnParentFailure = Literal["cancel", "run"]
ON_PARENT_FAILURE: tuple[OnParentFailure, ...] = ("cancel", "run")


class HasId(Protocol):
    """A job as depends_on takes it: anything with the job's id (an aiopgq.Job)."""

    @property
    def id(self) -> int: ...


# depends_on: one job or id, or several.
Parents = HasId | int | Iterable[HasId | int]


class JobOptions(TypedDict, total=False):
    """Where, when and how a job runs: the options of every enqueue path (None: the
    task's setting, else the default).

    queue: the queue's name (the task's, else "default"). run_at: when the job may start
    (an aware datetime), or delay: seconds or a timedelta from now. priority: a 32-bit
    int, higher runs first. max_attempts: runs before it ends failed. on_conflict and
    unique_for: what a held idempotency key does ("ignore", "replace", "raise") and how
    long a done job keeps its key. concurrency_key: the job's key for its queue's
    per-key limit. depends_on: jobs (or their ids) that must all be done before this one
    runs; until then it is `waiting`. on_parent_failure: what a parent that ends failed
    or cancelled does to it: "cancel" (default: it is cancelled, and its own dependents
    after it) or "run" (it runs once every parent has finished). sequence_key: jobs with
    the same key run one at a time, in enqueue order, fleet-wide; one that ends failed
    holds the rest of its sequence until it is retried or cancelled.
    """

    queue: str | None
    run_at: datetime | None
    delay: timedelta | float | None
    priority: int | None
    max_attempts: int | None
    on_conflict: OnConflict
    unique_for: timedelta | float | None
    concurrency_key: str | None
    depends_on: Parents | None
    on_parent_failure: OnParentFailure
    sequence_key: str | None


class _OneKey(TypedDict, total=False):
    idempotency_key: str | None  # while a job holds this key, enqueue returns that job


class _ManyKeys(TypedDict, total=False):
    idempotency_keys: Sequence[str | None] | None  # one key (or None) per payload


class _AsyncCall(TypedDict, total=False):
    connection: Connection | None  # yours: the job commits with your transaction
    enqueue_retry_for: float | timedelta | None  # wait out an unreachable database


class _SyncCall(TypedDict, total=False):
    connection: Any  # a psycopg connection of yours: the job commits with it


class EnqueueOptions(JobOptions, _OneKey, _AsyncCall, total=False):
    """The options of Queue.enqueue and Task.enqueue."""


class EnqueueManyOptions(JobOptions, _ManyKeys, _AsyncCall, total=False):
    """The options of Queue.enqueue_many/copy_many and Task.enqueue_many/copy_many."""


class SyncEnqueueOptions(JobOptions, _OneKey, _SyncCall, total=False):
    """The options of SyncQueue.enqueue."""


class SyncEnqueueManyOptions(JobOptions, _ManyKeys, _SyncCall, total=False):
    """The options of SyncQueue.enqueue_many."""


def _names(options: type) -> frozenset[str]:
    return frozenset(options.__required_keys__ | options.__optional_keys__)  # type: ignore[attr-defined]


ONE_JOB_OPTIONS = _names(EnqueueOptions)
MANY_JOBS_OPTIONS = _names(EnqueueManyOptions)
SYNC_ONE_JOB_OPTIONS = _names(SyncEnqueueOptions)
SYNC_MANY_JOBS_OPTIONS = _names(SyncEnqueueManyOptions)
# A task cannot have a parameter of these names: Task.enqueue takes both in one call.
OPTION_NAMES = ONE_JOB_OPTIONS | MANY_JOBS_OPTIONS


def check_option_names(options: Mapping[str, Any], allowed: frozenset[str], call: str) -> None:
    """TypeError naming an option `call` does not take (keyword arguments are not typed
    at run time)."""
    unknown = options.keys() - allowed
    if unknown:
        raise TypeError(
            f"{call}() got unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, sorted(unknown)))}; its options are {', '.join(sorted(allowed))}"
        )


def split_options(kwargs: dict[str, Any]) -> tuple[dict[str, Any], EnqueueOptions]:
    """A Task.enqueue call's keyword arguments: (the task's own, the enqueue options)."""
    if kwargs.keys().isdisjoint(ONE_JOB_OPTIONS):
        return kwargs, {}
    options: dict[str, Any] = {}
    for name in ONE_JOB_OPTIONS & kwargs.keys():
        options[name] = kwargs.pop(name)
    return kwargs, options  # type: ignore[return-value]  # keys checked against the TypedDict


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
    parents: tuple[int, ...] = ()  # depends_on's job ids, in order, each once
    on_parent_failure: OnParentFailure = "cancel"
    sequence_key: str | None = None  # the sequence the jobs join, in order

    @property
    def linked(self) -> bool:
        """Whether the jobs get edges after their insert (parents or a sequence)."""
        return bool(self.parents) or self.sequence_key is not None


def resolve_options(
    known: TaskDefaults | None,
    *,
    queue: str | None,
    run_at: datetime | None,
    delay: timedelta | float | None,
    priority: int | None,
    max_attempts: int | None,
    concurrency_key: str | None = None,
    depends_on: Parents | None = None,
    on_parent_failure: OnParentFailure | None = None,
    sequence_key: str | None = None,
) -> Options:
    """Checked options; `known` is the task if it is registered in this process."""
    if queue == "":  # not "no queue given", which is None: a name that went missing
        raise ValueError(
            "queue='' is an empty queue name: name a queue, or pass None (or leave it out) "
            "for the task's queue, else 'default'"
        )
    return Options(
        queue=check_queue_name(
            queue if queue is not None else known.queue_name if known else "default"
        ),
        priority=check_priority(_or(priority, known.priority if known else 0)),
        max_attempts=check_max_attempts(_or(max_attempts, known.max_attempts if known else 5)),
        run_at=resolve_run_at(run_at, delay),
        concurrency_key=None if concurrency_key is None else check_key(concurrency_key),
        parents=parent_ids(depends_on),
        on_parent_failure=check_on_parent_failure(on_parent_failure),
        sequence_key=None if sequence_key is None else check_key(sequence_key, "sequence_key"),
    )


def parent_ids(depends_on: Parents | None) -> tuple[int, ...]:
    """depends_on's job ids, in order, each once: from a Job or an id, or several."""
    if depends_on is None:
        return ()
    items: Iterable[Any]
    if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, Iterable):
        items = (depends_on,)
    else:
        items = depends_on
    ids: dict[int, None] = {}
    for item in items:
        value = item if isinstance(item, int) else getattr(item, "id", None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TypeError(
                f"depends_on takes jobs (aiopgq.Job) or job ids (ints >= 1), one or a list; "
                f"got {shown(item)}"
            )
        ids[value] = None
    return tuple(ids)


def check_on_parent_failure(value: OnParentFailure | None) -> OnParentFailure:
    if value is None:
        return "cancel"
    if value not in ON_PARENT_FAILURE:
        raise ValueError(
            f"on_parent_failure must be 'cancel' or 'run', got {shown(value)}: 'cancel' "
            "cancels the job when a parent ends failed or cancelled, 'run' runs it anyway"
        )
    return value


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
        raise ValueError(f"max_attempts must be an int >= 1, got {shown(max_attempts)}")
    return max_attempts


def check_limit(name: str, value: int | None) -> int | None:
    """A count limit (a queue's concurrency, burst, key_concurrency; a task's
    key_concurrency): an int >= 1 that fits in 32 bits, or None for no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{name} must be an int >= 1, or None to remove the limit; got {shown(value)}"
        )
    if value > 2**31 - 1:
        raise ConfigurationError(f"{name} must fit in 32 bits; got {value}")
    return value


def check_key(key: str, name: str = "concurrency_key") -> str:
    if not isinstance(key, str) or not key or len(key) > 200 or "\x00" in key:
        raise ValueError(
            f"{name} must be a non-empty string of at most 200 characters, got {shown(key)}"
        )
    return key


def check_queue_name(queue: str) -> str:
    if queue == "":
        raise ValueError("queue name '' is empty: name the queue")
    if not isinstance(queue, str) or len(queue) > 200 or "\x00" in queue:
        raise ValueError(
            f"queue name must be a non-empty string of at most 200 characters, got {shown(queue)}"
        )
    return queue
