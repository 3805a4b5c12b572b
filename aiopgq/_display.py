"""What the dashboard and the CLI show of a job's JSON columns: capped and decoded
defensively, so that a payload written by hand (20 MB, or nested 5,000 deep) shows as a
placeholder instead of breaking the page or the command."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from ._errors import Error
from ._errors import shown as shown  # how the dashboard, too, quotes what a user gave
from ._models import Job, JobStatus, JobWaiter, history_of, job_from_record

VIEW_CHARS = 64 * 1024
"""Characters of a payload's, result's or metadata's JSON text fetched to show one job."""
LIST_CHARS = 1024
"""The same for lists of jobs, which show none of the three."""

_COLUMNS = ("payload", "result", "metadata")


@dataclass(frozen=True)
class Unshown:
    """A payload, result or metadata shown as this text instead of its value."""

    what: str
    size: int | None  # bytes of its whole JSON text
    reason: str
    head: str = ""  # its first characters, for a cut one

    def __str__(self) -> str:
        size = "" if self.size is None else f", {_size(self.size)}"
        text = f"<{self.what} not shown: {self.reason}{size}>"
        return f"{text}\n{self.head}" if self.head else text


def decoded_job(row: Mapping[str, Any] | asyncpg.Record, owner: JobWaiter | None = None) -> Job:
    """job_from_record, with an aiopgq Error naming the job when Python cannot decode its
    JSON (nested deeper than Python's recursion limit)."""
    try:
        return job_from_record(row, owner)
    except RecursionError:
        job_id = row["id"]
        raise Error(
            f"job {job_id}'s payload, result or metadata is nested too deep to decode in "
            f"Python: `aiopgq job {job_id}` shows what it can, `aiopgq cancel {job_id}` "
            "(or queue.cancel) ends it"
        ) from None


def view_job(row: Mapping[str, Any] | asyncpg.Record) -> Job:
    """A Job to show from a row read with a cap (sql/read/get_job.sql's last argument): its
    payload, result and checkpoint are their values, or Unshown when cut or undecodable.
    For rendering only: such a Job is not what Queue.get_job returns."""
    values = dict(row)
    shown = {
        column: _decode(values[column], values.get(f"{column}_bytes"), column)
        for column in _COLUMNS
    }
    values.update(payload="{}", result=None, metadata=None)
    job = job_from_record(values)
    fields = job.__dict__
    fields["payload"] = shown["payload"]
    fields["result"] = shown["result"]
    metadata = shown["metadata"]
    if isinstance(metadata, dict):
        try:
            fields["history"] = history_of(metadata.get("history") or ())
        except (KeyError, TypeError, ValueError):
            fields["history"] = ()
        fields["progress"] = metadata.get("progress")
        fields["checkpoint"] = metadata.get("checkpoint")
    elif isinstance(metadata, Unshown):
        fields["checkpoint"] = metadata
    return job


def current_error(job: Job) -> str | None:
    """The error a job stands on now: its last attempt's, unless that attempt succeeded
    (a done job's last_error is of an earlier attempt, kept in its errors history)."""
    return None if job.status is JobStatus.DONE else job.last_error


def pretty(value: Any) -> str:
    """A payload or result as indented JSON, or its placeholder."""
    if isinstance(value, Unshown):
        return str(value)
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        return str(Unshown("value", None, "nested too deep to show"))


def plain(value: Any) -> Any:
    """A value for JSON output: itself, or its placeholder's text."""
    return str(value) if isinstance(value, Unshown) else value


def _decode(text: str | None, size: int | None, what: str) -> Any:
    if text is None:
        return None
    if size is not None and size > len(text.encode()):  # cut by the query
        return Unshown(what, size, f"too large, its first {len(text):,} characters as text", text)
    try:
        return json.loads(text)
    except RecursionError:
        return Unshown(what, size, "nested too deep to show")
    except ValueError:
        return Unshown(what, size, "not valid JSON", text)


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1024 / 1024:.1f} MB"
