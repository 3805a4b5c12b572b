"""`aiopgq jobs` and `aiopgq job`: jobs as an operator reads them, with their errors."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from .. import Job, JobEvent, JobStatus, JobSteps
from .._display import current_error, plain, pretty
from .common import AddCommand, UsageError, queue_of

_STATUSES = [status.value for status in JobStatus]


def register(add: AddCommand) -> None:
    jobs = add("jobs", "list the newest jobs with their current error")
    jobs.add_argument(
        "--status", choices=_STATUSES, help="only jobs in this status (default: any status)"
    )
    jobs.add_argument("--queue", help="only jobs of this queue (default: any queue)")
    jobs.add_argument("--task", help="only jobs of this task (default: any task)")
    jobs.add_argument("--limit", type=int, default=50, metavar="N", help="at most N jobs")
    jobs.set_defaults(run=list_jobs)

    job = add("job", "show one job in full: payload, attempts, errors, times, worker")
    job.add_argument("id", type=int, metavar="ID", help="the job's id")
    job.add_argument("--json", action="store_true", help="print it as one JSON object")
    job.set_defaults(run=show_job)


async def list_jobs(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    async with queue_of(args) as queue:
        await queue.check_schema()
        found = await queue.list_jobs(
            status=args.status, queue=args.queue, task=args.task, limit=args.limit, preview=True
        )
    print(f"{'id':>10} {'status':<9} {'queue':<14} {'task':<24} {'tries':>5} {'when':<19}  error")
    for job in found:
        when = job.finished_at or job.run_at
        tries = f"{job.attempts}/{job.max_attempts}"
        print(
            f"{job.id:>10} {job.status.value:<9} {_cut(job.queue, 14):<14} "
            f"{_cut(job.task, 24):<24} {tries:>5} {_time(when):<19}  {summary(current_error(job))}"
        )
    if not found:
        print("(no jobs)")
    return 0


async def show_job(args: argparse.Namespace) -> int:
    async with queue_of(args) as queue:
        job = await queue.get_job(args.id, preview=True)
        steps = await queue.job_steps(args.id)
    if args.json:
        print(json.dumps(as_dict(job) | steps_dict(steps), indent=2, default=str))
        return 0
    rows = [
        ("id", job.id),
        ("task", job.task),
        ("queue", job.queue),
        ("status", job.status.value),
        ("priority", job.priority),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("worker", _worker(job)),
        ("created", _time(job.created_at)),
        ("run at", _time(job.run_at)),
        ("heartbeat", _time(job.heartbeat_at)),
        ("finished", _time(job.finished_at)),
        ("payload", pretty(job.payload)),
        ("result", "-" if job.result is None else pretty(job.result)),
    ]
    if job.progress is not None:  # reported by its handler (ctx.progress)
        rows.append(("progress", f"{job.progress:.0%}"))
        rows.append(("checkpoint", pretty(job.checkpoint)))
    for name, value in rows:
        print(f"{name + ':':<11}{_indent(str(value))}")
    for event in job.history:  # snoozes and aborts
        print(f"{'event:':<11}{_event(event)}")
    show_steps(steps)
    print(f"errors:    {_errors_line(job)}")
    for error in job.errors:
        print(f"\n--- attempt {error.attempt}, {_time(error.at)}, worker {error.worker or '-'}")
        print(error.error.rstrip())
    current = current_error(job)
    if current and not job.errors:  # failed before the history existed
        print(f"\n--- last error\n{current.rstrip()}")
    return 0


def as_dict(job: Job) -> dict[str, Any]:
    """The job as JSON types (times as ISO 8601 text)."""
    return {
        "id": job.id,
        "task": job.task,
        "queue": job.queue,
        "status": job.status.value,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "worker": job.locked_by,
        "created_at": _iso(job.created_at),
        "run_at": _iso(job.run_at),
        "heartbeat_at": _iso(job.heartbeat_at),
        "finished_at": _iso(job.finished_at),
        "payload": plain(job.payload),
        "result": plain(job.result),
        "last_error": job.last_error,
        "errors": [
            {"at": _iso(e.at), "attempt": e.attempt, "worker": e.worker, "error": e.error}
            for e in job.errors
        ],
        "progress": job.progress,
        "checkpoint": plain(job.checkpoint),
        "history": [
            {"event": e.event, "at": _iso(e.at), "attempt": e.attempt, "worker": e.worker}
            | ({"seconds": e.seconds} if e.event == "snooze" else {"reason": e.reason})
            | ({"over_limit": True} if e.over_limit else {})
            for e in job.history
        ],
    }


def show_steps(steps: JobSteps) -> None:
    """A job's durable steps, one line each, and what it waits for (ctx.step, ctx.sleep,
    ctx.wait_event)."""
    if steps.waiting_for is not None:
        print(f"{'waits for:':<11}{steps.waiting_for}")
    for step in steps.steps:
        until = f", until {_time(step.until)}" if step.until is not None else ""
        print(
            f"{'step:':<11}{step.name} ({step.kind}, attempt {step.attempt}, "
            f"{_time(step.finished_at)}, {step.duration:.3f} s{until})"
        )


def steps_dict(steps: JobSteps) -> dict[str, Any]:
    """The steps and the wait as JSON types, for `aiopgq job --json`."""
    return {
        "steps": [
            {
                "name": s.name,
                "kind": s.kind,
                "attempt": s.attempt,
                "started_at": _iso(s.started_at),
                "finished_at": _iso(s.finished_at),
                "duration": s.duration,
            }
            | ({"until": _iso(s.until)} if s.until is not None else {})
            for s in steps.steps
        ],
        "waiting_for": {
            "event": steps.event,
            "timeout_at": _iso(steps.event_timeout),
            "sleeping_until": _iso(steps.sleeping_until),
        },
    }


def _event(event: JobEvent) -> str:
    """A snooze or an abort, on one line."""
    if event.event == "snooze":
        what = f"snoozed for {event.seconds:g} s" + (
            " (over max_snoozes)" if event.over_limit else ""
        )
    else:
        what = f"aborted: {event.reason}"
    return f"attempt {event.attempt} {what}, {_time(event.at)}, worker {event.worker or '-'}"


def _worker(job: Job) -> str:
    if job.locked_by:  # running, or cancelled while running
        return job.locked_by
    # A done job's last attempt succeeded: the worker of an earlier failed one is history.
    if job.status is not JobStatus.DONE and job.errors and job.errors[-1].worker:
        return f"{job.errors[-1].worker} (its last failed attempt)"
    return "-"


def _errors_line(job: Job) -> str:
    if not job.errors:
        return "none"
    if job.status is JobStatus.DONE:
        return f"{len(job.errors)}, of earlier attempts (attempt {job.attempts} succeeded)"
    return str(len(job.errors))


def summary(error: str | None, width: int = 70) -> str:
    """The line of an error that says what happened (a traceback's last line)."""
    if not error:
        return ""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return _cut(lines[-1] if lines else "", width)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _indent(text: str) -> str:
    return text.replace("\n", "\n" + " " * 11)
