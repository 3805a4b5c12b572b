"""Stop requests: which running jobs the worker asked to stop, and why.

The dispatcher records them as it cancels a job's task: the job was cancelled in the
database (Queue.cancel), its lease could not be renewed (the fence), or the shutdown
deadline passed (every job). JobContext.cancelled reads them. Entries are per run (the
Job object), so a job rescued and claimed again by this worker starts with none.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._models import Job


class StopRequests:
    def __init__(self) -> None:
        self.all = False  # the grace period is over: every running job goes back to pending
        self.cancelling: dict[int, Job] = {}  # runs stopped because their job was cancelled
        self.fenced: dict[int, tuple[Job, str]] = {}  # runs stopped, why their lease is lost
        # Jobs whose `done` ctx.transaction() committed while their handler still runs:
        # their lease ended with the commit, and nothing is to be stopped.
        self.settled: set[int] = set()

    def requested(self, job: Job) -> bool:
        """Whether this run of the job was asked to stop (ctx.cancelled)."""
        return self.all or self.stopping(job)

    def stopping(self, job: Job) -> bool:
        """Whether this run is being stopped already (its job cancelled, or fenced)."""
        fenced = self.fenced.get(job.id)
        return self.cancelling.get(job.id) is job or (fenced is not None and fenced[0] is job)

    def forget_ended(self, running: Mapping[int, Job]) -> None:
        """Drop the entries of runs that ended without taking theirs (a handler that
        swallowed its cancellation)."""
        for job_id in [i for i, job in self.cancelling.items() if running.get(i) is not job]:
            del self.cancelling[job_id]
        for job_id in [i for i, (job, _) in self.fenced.items() if running.get(i) is not job]:
            del self.fenced[job_id]
