"""HTML for the dashboard: Jinja2 templates (autoescaped) and the filters they use."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from aiopgq import Job, JobStatus
from aiopgq._display import current_error, pretty

from .settings import Settings

TEMPLATES = Path(__file__).resolve().parent / "templates"
# A request for a page's live region only (the page's script polls with it).
LIVE_HEADER = "x-aiopgq-live"


class Templates:
    """Renders a page, or only its live region when the page's script asks for it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            ago=ago,
            duration=duration,
            rate=rate,
            when=when,
            pretty=pretty,
            summary=summary,
            current_error=current_error,
        )

    def page(
        self, request: Request, name: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        live = request.headers.get(LIVE_HEADER) == "1"
        template = self.env.get_template(f"{name}_live.html" if live else f"{name}.html")
        html = template.render(
            base=request.scope.get("root_path", "").rstrip("/"),
            schema=self.settings.queue.schema,
            actions=self.settings.actions,
            read_only=self.settings.read_only,
            poll_ms=int(self.settings.poll_interval * 1000),
            window=self.settings.window,
            now=datetime.now(timezone.utc),
            statuses=[status.value for status in JobStatus],
            page=name,
            **context,
        )
        return HTMLResponse(html, status_code, headers={"cache-control": "no-store"})


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """'12 s ago', 'in 3 min', '-' for None: how far a time is from now, in one unit."""
    if moment is None:
        return "-"
    if moment.tzinfo is None:  # asyncpg's +-infinity come back naive
        return "never" if moment == datetime.max else "long ago"
    seconds = ((now or datetime.now(timezone.utc)) - moment).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"{duration(seconds)} ago" if seconds > 0 else f"in {duration(-seconds)}"


def duration(seconds: float | None) -> str:
    """'0.4 s', '42 s', '3 min', '5 h', '2 d': seconds in the largest fitting unit."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f} s"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit}"
    return f"{seconds:.0f} s"


def rate(per_second: float) -> str:
    """'12/s', '1.5/s', '3/min', '0': a rate in the unit that shows it best."""
    if per_second == 0:
        return "0"
    if per_second >= 10:
        return f"{per_second:.0f}/s"
    if per_second >= 1:
        return f"{per_second:.1f}/s"
    return f"{per_second * 60:.0f}/min"


def when(moment: datetime | None) -> str:
    """A time in full, in UTC: '2026-12-01 11:03:03 UTC'."""
    if moment is None:
        return "-"
    if moment.tzinfo is None:
        return "never" if moment == datetime.max else "-"
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def summary(error: str | None, length: int = 120) -> str:
    """An error's last line (the exception and its message), cut to `length`."""
    if not error:
        return ""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    return last if len(last) <= length else last[: length - 1] + "…"


def timeline(job: Job) -> list[tuple[datetime, str]]:
    """A job's history, oldest first: enqueued, failed attempts, snoozes, started, finished."""
    events: list[tuple[datetime, str]] = [(job.created_at, "enqueued")]
    if job.run_at > job.created_at and job.run_at.tzinfo is not None:
        events.append((job.run_at, "due to run"))
    for error in job.errors:
        where = f" on {error.worker}" if error.worker else ""
        events.append((error.at, f"attempt {error.attempt} failed{where}: {summary(error.error)}"))
    for event in job.history:  # free snoozes (aborts and snoozes past the limit are errors)
        if event.event == "snooze" and not event.over_limit:
            events.append((event.at, f"attempt {event.attempt} snoozed for {event.seconds:g} s"))
    if job.status is JobStatus.RUNNING and job.heartbeat_at is not None:
        events.append(
            (job.heartbeat_at, f"attempt {job.attempts} running on {job.locked_by} (heartbeat)")
        )
    if job.finished_at is not None:
        events.append((job.finished_at, job.status.value))
    return sorted(events, key=lambda event: event[0])
