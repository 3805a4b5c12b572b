"""Special outcomes: snoozes, aborts, the outcomes of jobs that reported progress, and
the done of a job whose last action was a durable step (its row goes with the done).

Plain outcomes (done, error, release) keep their own lean statements; these carry
more columns and go through sql/complete/complete_special.sql, only when there are some.
"""

from __future__ import annotations

from datetime import datetime

from .._db.connection import Connection
from .._db.statements import Statements
from .._models import Job
from .._steps import LastStep


class SpecialOutcomes:
    """Special outcomes not yet written, as column arrays ready for `unnest`."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.attempts: list[int] = []
        self.kinds: list[str] = []
        self.results: list[str | None] = []
        self.delays: list[float] = []
        self.errors: list[str | None] = []
        self.finals: list[bool] = []
        self.progress: list[float | None] = []
        self.states: list[str | None] = []
        self.events: list[str | None] = []
        self.max_snoozes: list[int] = []
        # Last steps written with their job's done: job ids, positions, names, results, starts.
        self.step_ids: list[int] = []
        self.step_positions: list[int] = []
        self.step_names: list[str] = []
        self.step_results: list[str | None] = []
        self.step_starts: list[float] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add(
        self,
        job: Job,
        kind: str,
        *,
        result: str | None = None,
        delay: float = 0.0,
        error: str | None = None,
        final: bool = False,
        progress: float | None = None,
        state: str | None = None,
        event: str | None = None,
        max_snoozes: int = 0,
        step: LastStep | None = None,
    ) -> None:
        """`kind` is 'done', 'error' or 'snooze' (see sql/complete/complete_special.sql)."""
        self.ids.append(job.id)
        self.attempts.append(job.attempts)
        self.kinds.append(kind)
        self.results.append(result)
        self.delays.append(delay)
        self.errors.append(error)
        self.finals.append(final)
        self.progress.append(progress)
        self.states.append(state)
        self.events.append(event)
        self.max_snoozes.append(max_snoozes)
        if step is not None:
            self.step_ids.append(job.id)
            self.step_positions.append(step.position)
            self.step_names.append(step.name)
            self.step_results.append(step.result)
            self.step_starts.append(step.started)

    async def write(self, conn: Connection, sql: Statements, worker_id: str) -> list[datetime]:
        """Apply them in one statement; the run_at of the jobs that went back to pending."""
        rows = await conn.fetch(
            sql.complete_special,
            self.ids,
            self.attempts,
            self.kinds,
            self.results,
            self.delays,
            self.errors,
            self.finals,
            self.progress,
            self.states,
            self.events,
            self.max_snoozes,
            worker_id,
            self.step_ids,
            self.step_positions,
            self.step_names,
            self.step_results,
            self.step_starts,
        )
        return [row[2] for row in rows if row[1] == "pending"]
