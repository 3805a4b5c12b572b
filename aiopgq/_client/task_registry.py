"""The task registry as producers see it: declarations workers recorded, cached per queue.

Workers record the tasks they serve when they start (aiopgq/_worker/registration.py).
A producer that enqueues by name a task it did not register itself takes that task's
queue, priority and max_attempts from the registry, checks the payload's keys against
its arguments, and is refused an unknown name while any worker registered tasks.

`RegistryCache` decides when to read and what a read means, without I/O, so that the
asyncio Queue (aiopgq/_client/enqueue.py) and the synchronous SyncQueue share it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import TaskNotFound, shown
from .._payload import KeywordCheck

# A copy of the registry is used this long, then read again on the next lookup.
REFRESH_AFTER = 60.0
# A name missing from a copy at least this old reads the registry again (a worker
# may have registered it since); a younger copy answers at once.
MISS_RETRY_AFTER = 5.0


@dataclass(frozen=True)
class Declaration:
    """A task as a worker registered it: what enqueue by name needs (see TaskDefaults)."""

    name: str
    queue_name: str
    priority: int
    max_attempts: int
    check_keywords: KeywordCheck


def declaration_of(row: Mapping[str, Any]) -> Declaration:
    """A row of sql/enqueue/registered_tasks.sql as a Declaration."""
    name = row["name"]
    return Declaration(
        name=name,
        queue_name=row["queue"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        check_keywords=KeywordCheck(name, row["arguments"], row["required"], row["any_keyword"]),
    )


class RegistryCache:
    """One producer's copy of the registry, and the rule for when to read it again.

    A lookup reads when there is no copy yet, when the copy is older than
    REFRESH_AFTER, or when the name is missing from a copy older than
    MISS_RETRY_AFTER: a process reads the registry at most once per name it
    enqueues by name, then once a minute (and at most every 5 s for unknown names).
    """

    def __init__(self) -> None:
        self._known: dict[str, Declaration] | None = None
        self._read_at = 0.0

    def needs_read(self, name: str) -> bool:
        if self._known is None:
            return True
        age = time.monotonic() - self._read_at
        if age >= REFRESH_AFTER:
            return True
        return name not in self._known and age >= MISS_RETRY_AFTER

    def update(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self._known = {d.name: d for d in map(declaration_of, rows)}
        self._read_at = time.monotonic()

    def resolve(self, name: str) -> Declaration | None:
        """The task's declaration; None when no worker registered any task (enqueue as
        before the registry existed); TaskNotFound when others are registered."""
        known = self._known or {}
        found = known.get(name)
        if found is None and known:
            raise task_not_found(name, sorted(known))
        return found


def task_not_found(name: str, known: list[str]) -> TaskNotFound:
    return TaskNotFound(
        f"no task named {shown(name)} is registered (known: {', '.join(known)}): check the "
        f"name, or register it with @queue.task(name={shown(name)}) in the worker's code and "
        "start that worker (workers record their tasks when they start)",
        task=name,
        known=known,
    )
