"""Prepare: an enqueue checked and encoded before any I/O, the same for Queue and SyncQueue.

What differs between the two is only how they reach the database: the task's defaults
come from the task registered here, else from the registry the caller read (async or
not), and the prepared rows go out through asyncpg or psycopg.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._enqueue_options import JobOptions, Options, TaskDefaults, resolve_options
from .._payload import encode_payload
from .inserts import Batch, make_batch
from .unique import Uniqueness, uniqueness

_KEYED_PARENTS = (
    "depends_on takes no idempotency key: the job that holds the key may have been "
    "enqueued without those parents; enqueue without the key, or without depends_on"
)
_KEYED_SEQUENCE = (
    "sequence_key takes no idempotency key: the job that holds the key may have been "
    "enqueued outside the sequence; enqueue without the key, or without sequence_key"
)


@dataclass
class OneJob:
    """One job ready to insert: its arguments, their JSON text, where and when it goes."""

    task: str
    arguments: dict[str, Any]
    text: str
    options: Options
    unique: Uniqueness | None  # its idempotency key, if it has one


def prepare_one(
    task: str,
    payload: Mapping[str, Any] | None,
    defaults: TaskDefaults | None,
    options: JobOptions,
    key: str | None,
    max_payload_bytes: int,
    *,
    checked: bool = False,
) -> OneJob:
    """One job of `task`; `checked`: `payload` is already bound to the task (Task.enqueue)."""
    if payload is not None and defaults is not None and not checked:
        defaults.check_keywords(payload)
    arguments = dict(payload or {})
    resolved = resolve(defaults, options)
    if key is not None:
        _refuse_keyed(resolved)
    return OneJob(
        task,
        arguments,
        encode_payload(arguments, task, max_payload_bytes),
        resolved,
        uniqueness(
            None if key is None else [key],
            1,
            options.get("unique_for"),
            options.get("on_conflict", "ignore"),
        ),
    )


def prepare_many(
    task: str,
    payloads: Iterable[Mapping[str, Any]],
    defaults: TaskDefaults | None,
    options: JobOptions,
    keys: Sequence[str | None] | None,
    max_payload_bytes: int,
) -> tuple[Batch, Uniqueness | None]:
    """Jobs of `task` for one statement, checked against its arguments, and their keys."""
    resolved = resolve(defaults, options)
    if keys is not None and any(key is not None for key in keys):
        _refuse_keyed(resolved)
    batch = make_batch(defaults, task, payloads, max_payload_bytes, resolved)
    unique = uniqueness(
        keys,
        len(batch.payloads),
        options.get("unique_for"),
        options.get("on_conflict", "ignore"),
    )
    return batch, unique


def _refuse_keyed(resolved: Options) -> None:
    """Idempotency keys with parents or a sequence: refused (the job holding a key may
    not have them)."""
    if resolved.parents:
        raise TypeError(_KEYED_PARENTS)
    if resolved.sequence_key is not None:
        raise TypeError(_KEYED_SEQUENCE)


def resolve(defaults: TaskDefaults | None, options: JobOptions) -> Options:
    """Where and when: the call's options, else the task's, else the defaults."""
    return resolve_options(
        defaults,
        queue=options.get("queue"),
        run_at=options.get("run_at"),
        delay=options.get("delay"),
        priority=options.get("priority"),
        max_attempts=options.get("max_attempts"),
        concurrency_key=options.get("concurrency_key"),
        depends_on=options.get("depends_on"),
        on_parent_failure=options.get("on_parent_failure"),
        sequence_key=options.get("sequence_key"),
    )
