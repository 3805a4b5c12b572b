"""Checking an enqueue's options and payloads before anything is written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ._payload import (
    check_max_attempts,
    check_priority,
    check_queue_name,
    encode_each_payload,
    encode_payloads,
    resolve_run_at,
)

if TYPE_CHECKING:
    from ._task import Task


@dataclass
class Options:
    """Where and when jobs go: the call's options, else the task's, else the defaults."""

    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None  # None: now, by the server's clock


def resolve_options(
    known: Task[Any, Any] | None,
    *,
    queue: str | None,
    run_at: datetime | None,
    delay: timedelta | float | None,
    priority: int | None,
    max_attempts: int | None,
) -> Options:
    """Checked options; `known` is the task if it is registered in this process."""
    return Options(
        queue=check_queue_name(queue or (known.queue_name if known else "default")),
        priority=check_priority(_or(priority, known.priority if known else 0)),
        max_attempts=check_max_attempts(_or(max_attempts, known.max_attempts if known else 5)),
        run_at=resolve_run_at(run_at, delay),
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
    known: Task[Any, Any] | None,
    task: str,
    payloads: Iterable[Mapping[str, Any]],
    max_payload_bytes: int,
    options: Options,
) -> Batch:
    """Payloads of a bulk enqueue, checked against the task's signature (TypeError names
    the one at fault); their JSON is checked when encoded (as_array or each)."""
    payload_list = [dict(p) for p in payloads]
    if known is not None:
        for payload in payload_list:
            known.check_keywords(payload)
    return Batch(task, payload_list, options, max_payload_bytes)


def _or(value: int | None, fallback: int) -> int:
    return fallback if value is None else value
