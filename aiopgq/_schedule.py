"""Schedule: a cron expression in a time zone, and the ticks it makes (croniter, DST-aware).

The worker's scheduler (aiopgq/_worker/scheduler.py) asks a Schedule which ticks are
due and when the next one is; croniter parses and iterates the expression. Around a
daylight-saving change a wall-clock time can fall in the gap (spring: croniter moves it
to the first time after the gap, so the tick still happens once) or happen twice
(autumn): there a schedule that fires at set hours ticks at the first occurrence only
(a daily 02:30 runs once), while one that fires every hour keeps its pace in real time
(every 30 minutes goes on through both 02:00-03:00 hours), as cron does.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ._context import context_parameter
from ._errors import ConfigurationError, shown
from ._models import current_job

if TYPE_CHECKING:
    from croniter import croniter

# croniter is imported where it is used: `import aiopgq` stays 12 ms faster for the
# programs (producers, most workers) that have no periodic task.

# What `missed=` accepts; see docs/periodic.md.
MISSED_POLICIES = ("latest", "skip", "all")
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_HOUR = 1  # croniter's expanded fields: minute, hour, day, month, weekday[, second]
_JUST_AFTER = timedelta(microseconds=1)


def zone_of(name: str) -> ZoneInfo:
    """The IANA time zone `name` (ConfigurationError naming the fix when unknown)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigurationError(
            f"unknown time zone {shown(name)}: use an IANA name such as 'Europe/Berlin' or 'UTC' "
            "(where the system has no time-zone database, `pip install tzdata`)"
        ) from None


class Schedule:
    """When a periodic task's ticks fall, and what each tick enqueues.

    >>> Schedule("*/5 * * * *", name="reports.refresh", timezone="Europe/Berlin").next_after(now)
    datetime.datetime(..., tzinfo=datetime.timezone.utc)
    """

    def __init__(
        self,
        cron: str,
        *,
        name: str,
        timezone: str = "UTC",
        missed: str = "latest",
        queue_name: str = "default",
        priority: int = 0,
        max_attempts: int = 5,
    ) -> None:
        self.name = name
        self.cron = _check_cron(cron, name)
        self.timezone = timezone
        self.zone: tzinfo = zone_of(timezone)
        if missed not in MISSED_POLICIES:
            raise ConfigurationError(
                f"periodic task {name}: missed={missed!r}; use one of "
                + ", ".join(repr(m) for m in MISSED_POLICIES)
            )
        self.missed = missed
        self.queue_name = queue_name
        self.priority = priority
        self.max_attempts = max_attempts
        self._with_seconds = len(self.cron.split()) == 6
        hours = self._iterator(datetime.now(tz=self.zone)).expanded[_HOUR]
        self._every_hour = hours == ["*"] or len(set(hours)) >= 24
        from croniter import CroniterError

        try:  # an expression that never fires (February 30th) fails here, not in a worker
            self.next_after(datetime.now(tz=self.zone))
        except CroniterError as exc:
            raise ConfigurationError(
                f"periodic task {name}: schedule {shown(cron)} never fires ({exc})"
            ) from None

    def __repr__(self) -> str:
        return f"<Schedule {self.name} {self.cron!r} {self.timezone} missed={self.missed}>"

    def due(self, after: datetime, now: datetime, limit: int) -> list[datetime]:
        """The newest `limit` ticks in (after, now], oldest first, in UTC."""
        ticks = self._iterator(now + _JUST_AFTER)  # get_prev is strictly before its start
        found: list[datetime] = []
        while len(found) < limit:
            tick = ticks.get_prev(datetime)
            if tick <= after:
                break
            if self._keeps(tick) and (not found or tick < found[-1]):
                found.append(tick)
        return [tick.astimezone(timezone.utc) for tick in reversed(found)]

    def next_after(self, moment: datetime) -> datetime:
        """The first tick after `moment`, in UTC."""
        ticks = self._iterator(moment)
        while True:
            tick = ticks.get_next(datetime)
            if tick > moment and self._keeps(tick):
                return tick.astimezone(timezone.utc)

    def payload(self, tick: datetime) -> str:
        """The JSON payload of the job of `tick`: the tick, in the schedule's time zone."""
        return json.dumps({"tick": tick.astimezone(self.zone).isoformat()})

    def _iterator(self, start: datetime) -> croniter[datetime]:
        from croniter import croniter

        return croniter(
            self.cron,
            start.astimezone(self.zone),
            ret_type=datetime,
            second_at_beginning=self._with_seconds,
        )

    def _keeps(self, tick: datetime) -> bool:
        """False for the second occurrence of a repeated wall-clock time (autumn), unless
        the schedule fires every hour."""
        if self._every_hour:
            return True
        local = tick.astimezone(timezone.utc).astimezone(self.zone)  # sets fold from UTC
        return not (local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset())


def _check_cron(cron: str, name: str) -> str:
    from croniter import CroniterError, croniter

    if not isinstance(cron, str):
        raise ConfigurationError(f"periodic task {name}: the schedule must be a cron string")
    text = " ".join(cron.split())
    fields = len(text.split())
    if not (text.lower() in _ALIASES or fields in (5, 6)):
        raise ConfigurationError(
            f"periodic task {name}: schedule {shown(cron)} has {fields} fields; use 5 "
            "(minute hour day month weekday, e.g. '*/5 * * * *'), 6 with seconds first "
            "(e.g. '*/10 * * * * *': every 10 seconds) or an alias such as '@daily'"
        )
    try:
        croniter(text, second_at_beginning=fields == 6)
    except CroniterError as exc:
        raise ConfigurationError(
            f"periodic task {name}: bad schedule {shown(cron)} ({exc})"
        ) from None
    return text


def with_tick(fn: Callable[..., Any], name: str, zone: tzinfo) -> Callable[..., Any]:
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
