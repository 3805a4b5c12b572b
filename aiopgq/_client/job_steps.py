"""Reading a job's durable steps back (Queue.job_steps): `aiopgq job` and the dashboard.
The steps themselves run in aiopgq/_steps.py."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone

from .._db.migrations import missing_schema_as_error
from .core import Core


@dataclass(frozen=True)
class JobStep:
    """One recorded durable step of a job, as `Queue.job_steps` reads it back.

    >>> [(s.name, s.duration) for s in (await queue.job_steps(job_id)).steps]

    Attributes:
        name: the step's name ("sleep:N" for a sleep, "event:NAME" for a wait).
        kind: "step", "sleep" or "event".
        attempt: the attempt of the run that recorded it.
        started_at: when that run started it (an aware datetime).
        finished_at: when it was recorded.
        until: a sleep's wake time, else None.
    """

    name: str
    kind: str
    attempt: int
    started_at: datetime
    finished_at: datetime
    until: datetime | None = None

    @property
    def duration(self) -> float:
        """Seconds from its start to its record (for a sleep or a wait: until it began)."""
        return max(0.0, (self.finished_at - self.started_at).total_seconds())


@dataclass(frozen=True)
class JobSteps:
    """A job's durable steps and what it waits for now (`Queue.job_steps`).

    >>> (await queue.job_steps(job_id)).waiting_for  # 'event payment:42'

    Attributes:
        steps: the recorded steps, in the handler's order.
        event: the event it waits for (ctx.wait_event), else None.
        event_timeout: that wait's deadline, else None.
        sleeping_until: when a sleeping job wakes (ctx.sleep), else None.
    """

    steps: tuple[JobStep, ...]
    event: str | None = None
    event_timeout: datetime | None = None
    sleeping_until: datetime | None = None

    @property
    def waiting_for(self) -> str | None:
        """What it waits for, in words ("event NAME" or "sleep until TIME"), or None."""
        if self.event is not None:
            deadline = "" if self.event_timeout is None else f" (until {self.event_timeout})"
            return f"event {self.event}{deadline}"
        if self.sleeping_until is not None:
            return f"sleep until {self.sleeping_until}"
        return None


def _at(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)


async def read_steps(core: Core, job_id: int) -> JobSteps:
    """The job's recorded steps and its current wait (an archived job has no steps)."""
    async with core.pool.acquire() as conn:
        with missing_schema_as_error(core.schema):
            rows = await conn.fetch(core.sql.job_steps, job_id)
            wait = await conn.fetchrow(core.sql.job_wait, job_id)
    steps = tuple(
        JobStep(
            name=r["name"],
            kind=r["kind"],
            attempt=r["attempt"],
            started_at=datetime.fromtimestamp(r["started"], timezone.utc),
            finished_at=datetime.fromtimestamp(r["finished"], timezone.utc),
            until=_at(r["until"]),
        )
        for r in rows
    )
    if wait is None:
        return JobSteps(steps)
    sleeping = None
    last = steps[-1] if steps else None
    if (
        wait["event"] is None
        and wait["status"] in ("pending", "waiting")  # a far wake time waits (job_timers)
        and last is not None
        and last.kind == "sleep"
        and wait["run_at"] > time.time()
    ):
        sleeping = _at(wait["run_at"])
    return JobSteps(steps, wait["event"], _at(wait["until"]), sleeping)
