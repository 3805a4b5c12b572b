"""Stop requests: which running jobs the worker asked to stop, and why.

The dispatcher records them as it cancels a job's task (the fence: its lease could
not be renewed; the shutdown deadline: every job), and JobContext.cancelled reads them.
"""

from __future__ import annotations


class StopRequests:
    def __init__(self) -> None:
        self.all = False  # the grace period is over: every running job goes back to pending
        self.fenced: dict[int, str] = {}  # job id -> why its lease is considered lost
        # Jobs whose `done` ctx.transaction() committed while their handler still runs:
        # their lease ended with the commit, and nothing is to be stopped.
        self.settled: set[int] = set()

    def requested(self, job_id: int) -> bool:
        return self.all or job_id in self.fenced
