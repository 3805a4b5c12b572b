"""Progress board: progress reported by handlers, waiting for the next heartbeat.

ctx.progress() only records here; the heartbeat takes what was reported since the
last beat and writes it with the lease extension, in the same statement.
"""

from __future__ import annotations

from .._context import JobContext


class ProgressBoard:
    def __init__(self) -> None:
        self._reported: dict[int, JobContext] = {}  # by job id, the latest report each

    def __bool__(self) -> bool:
        return bool(self._reported)

    def reported(self, context: JobContext) -> None:
        self._reported[context.job_id] = context

    def take(self) -> list[JobContext]:
        """Everything reported since the last take (the heartbeat writes it)."""
        taken = list(self._reported.values())
        self._reported.clear()
        return taken

    def restore(self, taken: list[JobContext]) -> None:
        """The beat that carried `taken` failed: keep the reports of jobs still running
        for the next one (the outcome of a job that ended carries its progress)."""
        for context in taken:
            if not context.ended:
                self._reported.setdefault(context.job_id, context)

    def forget(self, job_id: int) -> None:
        """The job ended: its outcome carries its progress."""
        self._reported.pop(job_id, None)
