"""Periodic jobs: the `@queue.periodic` decorator and the schedules' status.

The decorator registers the function as a task and its Schedule (aiopgq/_schedule.py);
every worker that serves the task's queue then enqueues its ticks
(aiopgq/_worker/scheduler.py), each tick once across all of them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import datetime, timezone, tzinfo
from typing import Any, ParamSpec, TypeVar

from .._context import context_parameter
from .._db.migrations import missing_schema_as_error
from .._errors import ConfigurationError
from .._models import current_job
from .._retry import Retry
from .._schedule import Schedule
from .._task import Task
from .core import QueueCore

P = ParamSpec("P")
R = TypeVar("R")


class Periodic(QueueCore):
    schedules: dict[str, Schedule]

    def periodic(
        self,
        cron: str,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        missed: str = "latest",
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 5,
        timeout: float | None = None,
        retry: Retry | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a task that runs on a cron schedule (5 fields, or 6 with seconds first).

        >>> @queue.periodic("*/5 * * * *", name="reports.refresh", timezone="Europe/Berlin")
        ... async def refresh(tick: datetime) -> None: ...
        """

        def register(fn: Callable[P, R]) -> Task[P, R]:
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            schedule = Schedule(
                cron,
                name=task_name,
                timezone=timezone,
                missed=missed,
                queue_name=queue,
                priority=priority,
                max_attempts=max_attempts,
            )
            task: Task[P, R] = self._register_task(
                _with_tick(fn, task_name, schedule.zone),
                name=task_name,
                queue=queue,
                max_attempts=max_attempts,
                priority=priority,
                timeout=timeout,
                retry=retry,
            )
            self.schedules[task_name] = schedule
            return task

        return register

    async def schedule_status(self) -> list[dict[str, Any]]:
        """Every schedule in the database, with its last run and next run.

        >>> for row in await queue.schedule_status(): print(row["name"], row["next_run"])
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                rows = [dict(row) for row in await conn.fetch(self.sql.schedule_status)]
        now = datetime.now(timezone.utc)
        for row in rows:
            row["next_run"] = self._next_run(row, now)
        return rows

    def _next_run(self, row: dict[str, Any], now: datetime) -> datetime | None:
        """When a worker will enqueue the schedule's next tick, if one runs it by then."""
        schedule = self.schedules.get(row["name"])
        if schedule is None or schedule.cron != row["cron"]:
            try:  # a schedule of another program (the CLI has none)
                schedule = Schedule(row["cron"], name=row["name"], timezone=row["timezone"])
            except ConfigurationError:
                return None
        last = row["last_tick"] or row["since"]
        return schedule.next_after(max(now, last))


def _with_tick(fn: Callable[P, R], name: str, zone: tzinfo) -> Callable[..., Any]:
    """`fn` taking the tick: as `tick` (a datetime in the schedule's time zone) when it
    declares that parameter, and as current_job().tick either way.

    A tick's payload is {"tick": "<ISO 8601>"}; the wrapper's signature has `tick`, so
    the worker's argument check lets it through to here.
    """
    signature = inspect.signature(fn)
    declared = "tick" in signature.parameters
    context = context_parameter(fn)  # filled by the worker, as for any task
    for param in signature.parameters.values():
        if (
            param.name not in ("tick", context)
            and param.default is param.empty
            and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL)
        ):
            raise TypeError(
                f"periodic task {name}: parameter {param.name!r} has no default; a tick "
                "passes no arguments but `tick`, so give it a default or remove it"
            )
    if not declared:
        params = list(signature.parameters.values())
        at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
        tick = inspect.Parameter("tick", inspect.Parameter.KEYWORD_ONLY, default=None)
        signature = signature.replace(parameters=[*params[:at], tick, *params[at:]])

    def arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
        tick = kwargs.get("tick") if declared else kwargs.pop("tick", None)
        if isinstance(tick, str):  # from the payload
            tick = datetime.fromisoformat(tick).astimezone(zone)
            if declared:
                kwargs["tick"] = tick
            try:
                job = current_job()
            except RuntimeError:  # called directly, not by a worker
                return kwargs
            # The worker's Job of this run, made for it alone; frozen for users.
            object.__setattr__(job, "tick", tick)
        return kwargs

    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(fn):

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **arguments(kwargs))

        wrapper = run_async
    else:

        def run_sync(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **arguments(kwargs))

        wrapper = run_sync
    functools.update_wrapper(wrapper, fn)
    wrapper.__signature__ = signature  # type: ignore[union-attr]  # read by inspect
    return wrapper
