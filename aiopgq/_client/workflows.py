"""Workflows: a graph of jobs built in Python (WorkflowBuilder) and enqueued in one
transaction, and the reads and cancel of a workflow (Queue.get_workflow and the rest).

The graph's rows, the groups' counters and why they hold under concurrency:
sql/functions/workflows.sql.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from .._db.connection import Connection
from .._db.migrations import missing_schema_as_error
from .._errors import WorkflowNotFound
from .._models import Job, JobStatus
from .core import Core
from .inserts import batch_jobs
from .prepare import prepare_many
from .workflow_builder import NodeSpec, WorkflowBuilder

if TYPE_CHECKING:
    from .enqueue import Enqueue
    from .hooks import Hooks

FINISHED = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class WorkflowGroup:
    """A group of a workflow (add_many), as `Queue.get_workflow` reads it.

    >>> [(g.name, g.status, g.remaining) for g in workflow.groups]

    Attributes:
        id: the group's id (the `group` of its jobs, in WorkflowJob.parent_groups).
        name: its name.
        size: its members.
        remaining: members not done yet.
        failed: members that ended failed or cancelled.
        status: "running", "done" (every member done) or "failed" (a member failed or
            was cancelled).
    """

    id: int
    name: str
    size: int
    remaining: int
    failed: int
    status: str


@dataclass(frozen=True)
class WorkflowJob:
    """A job of a workflow, as `Queue.get_workflow` reads it.

    >>> [(j.id, j.task, j.status, j.parents, j.group_name) for j in workflow.jobs]

    Attributes:
        id: the job's id.
        node: its node's index in the builder (a group's members share one).
        task: its task's name (None once pruned).
        status: its status (None once pruned).
        parents: the job ids it depends on (job parents).
        parent_groups: the ids of the groups it depends on (WorkflowGroup.id).
        parent_group_names: their names, in the same order.
        group: the id of its group (None for a single job).
        group_name: its group's name (None for a single job).
        created_at: when it was enqueued.
        started_at: when its current run started (None unless running).
        finished_at: when it ended (None unless ended).
        attempts: runs so far.
        last_error: its latest error (None if none).
    """

    id: int
    node: int
    task: str | None
    status: JobStatus | None
    parents: tuple[int, ...]
    parent_groups: tuple[int, ...]
    parent_group_names: tuple[str, ...]
    group: int | None
    group_name: str | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int | None
    last_error: str | None


@dataclass(frozen=True)
class Workflow:
    """A workflow as it is now (`Queue.get_workflow`, `wait_for_workflow`,
    `list_workflows`).

    >>> wf = await queue.get_workflow(wid)
    >>> wf.status, wf.counts, [(j.task, j.status) for j in wf.jobs]

    Attributes:
        id: the workflow's id.
        name: its name.
        status: "running" (a job is pending, waiting or running), else "cancelled"
            (cancel_workflow was called, or a job was cancelled and none failed),
            "failed" (a job failed), or "done".
        created_at: when it was enqueued.
        cancelled_at: when cancel_workflow was called (None if never).
        counts: its jobs per status ("pruned" for jobs no longer stored).
        jobs: its jobs in node order (empty in `list_workflows`).
        groups: its groups (empty in `list_workflows`).
    """

    id: int
    name: str
    status: str
    created_at: datetime
    cancelled_at: datetime | None
    counts: dict[str, int]
    jobs: tuple[WorkflowJob, ...] = field(default=())
    groups: tuple[WorkflowGroup, ...] = field(default=())

    @property
    def finished(self) -> bool:
        """True once no job of it is pending, waiting or running."""
        return self.status != "running"


def workflow_status(counts: Mapping[str, int], cancelled: bool) -> str:
    """A workflow's status from its jobs' counts (Workflow.status says the rules)."""
    if any(counts.get(s, 0) for s in ("pending", "running", "waiting")):
        return "running"
    if cancelled:
        return "cancelled"
    if counts.get("failed", 0):
        return "failed"
    if counts.get("cancelled", 0):
        return "cancelled"
    return "done"


class Workflows:
    """The workflow methods of one Queue: enqueue a builder's graph, read, wait, cancel."""

    def __init__(self, core: Core, enqueue: Enqueue, hooks: Hooks) -> None:
        self._core = core
        self._enqueue = enqueue
        self._hooks = hooks

    def builder(self, name: str) -> WorkflowBuilder:
        return WorkflowBuilder(self, name)

    async def enqueue(self, name: str, specs: list[NodeSpec], connection: Connection | None) -> int:
        """The specs (parents first) as jobs with their graph: one statement, each job
        written once (enqueue_workflow(), sql/functions/workflows.sql)."""
        core = self._core
        batches = []
        for spec in specs:
            known = spec.known or core.tasks.get(spec.task)
            if known is None:
                known = await self._enqueue.declared(spec.task, connection, None)
            batch, _ = prepare_many(
                spec.task, spec.payloads, known, spec.options, None, core.max_payload_bytes
            )
            batches.append(batch)
        position = {spec.node._index: n for n, spec in enumerate(specs)}
        children: list[int] = []
        parents: list[int] = []
        for n, spec in enumerate(specs):
            for parent in dict.fromkeys(spec.parents):
                children.append(n)
                parents.append(position[parent._index])
        args = (
            name,
            [b.task for b in batches],
            "[" + ",".join(b.as_array() for b in batches) + "]",
            [b.options.queue for b in batches],
            [b.options.priority for b in batches],
            [b.options.run_at for b in batches],
            [b.options.max_attempts for b in batches],
            [b.options.concurrency_key for b in batches],
            [spec.options.get("on_parent_failure", "cancel") for spec in specs],
            [spec.node.label if spec.node.is_group else None for spec in specs],
            children,
            parents,
        )

        async def op(conn: Connection) -> asyncpg.Record:
            row: asyncpg.Record | None = await conn.fetchrow(core.sql.enqueue_workflow, *args)
            assert row is not None
            return row

        with missing_schema_as_error(core.schema):
            row = await core.run(connection, op)
        if self._hooks.enqueue_hooks:
            ids, start = row["ids"], 0
            jobs: list[Job] = []
            for spec, batch in zip(specs, batches, strict=True):
                status = JobStatus.WAITING if spec.parents else JobStatus.PENDING
                mine = ids[start : start + len(batch.payloads)]
                jobs.extend(batch_jobs(batch, mine, row["created_at"], status=status))
                start += len(batch.payloads)
            await self._hooks.enqueued(jobs)
        return int(row["workflow_id"])

    async def get(self, workflow_id: int) -> Workflow:
        core = self._core
        async with core.pool.acquire() as conn:
            with missing_schema_as_error(core.schema):
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    row = await conn.fetchrow(core.sql.workflow_summary, workflow_id)
                    if row is None:
                        raise self._not_found(workflow_id)
                    rows = await conn.fetch(core.sql.workflow_jobs, workflow_id)
        groups = tuple(_group(g) for g in json.loads(row["groups"]))
        names = {g.id: g.name for g in groups}
        jobs = tuple(_job(r, names) for r in rows)
        return _workflow(row, jobs, groups)

    async def summary(self, workflow_id: int) -> Workflow:
        """The workflow without its jobs (its counts and groups): one light read."""
        core = self._core
        async with core.pool.acquire() as conn:
            with missing_schema_as_error(core.schema):
                row = await conn.fetchrow(core.sql.workflow_summary, workflow_id)
        if row is None:
            raise self._not_found(workflow_id)
        return _workflow(row, (), tuple(_group(g) for g in json.loads(row["groups"])))

    async def wait(self, workflow_id: int, timeout: float | None) -> Workflow:
        """Read the summary until the workflow has ended (every 20 ms at first, backing
        off to 500 ms), then the whole workflow."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.02
        while not (await self.summary(workflow_id)).finished:
            if deadline is not None and time.monotonic() + pause > deadline:
                left = deadline - time.monotonic()
                if left > 0:
                    await asyncio.sleep(left)
                if not (await self.summary(workflow_id)).finished:
                    raise TimeoutError(
                        f"workflow {workflow_id} did not finish within {timeout} seconds"
                    )
                break
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 0.5)
        return await self.get(workflow_id)

    async def cancel(self, workflow_id: int) -> int:
        core = self._core
        async with core.pool.acquire() as conn:
            with missing_schema_as_error(core.schema):
                row = await conn.fetchrow(core.sql.cancel_workflow, workflow_id, core.sql.channel)
        if row is None:
            raise self._not_found(workflow_id)
        return int(row["cancelled"])

    async def recent(self, limit: int) -> list[Workflow]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        core = self._core
        async with core.pool.acquire() as conn:
            with missing_schema_as_error(core.schema):
                rows = await conn.fetch(core.sql.workflow_list, limit)
        return [_workflow(r, (), ()) for r in rows]

    def _not_found(self, workflow_id: int) -> WorkflowNotFound:
        return WorkflowNotFound(f"no workflow with id {workflow_id} in schema {self._core.schema}")


def _workflow(
    row: asyncpg.Record, jobs: tuple[WorkflowJob, ...], groups: tuple[WorkflowGroup, ...]
) -> Workflow:
    counts = {str(k): int(v) for k, v in json.loads(row["counts"]).items()}
    return Workflow(
        id=row["id"],
        name=row["name"],
        status=workflow_status(counts, row["cancelled_at"] is not None),
        created_at=row["created_at"],
        cancelled_at=row["cancelled_at"],
        counts=counts,
        jobs=jobs,
        groups=groups,
    )


def _group(g: Mapping[str, Any]) -> WorkflowGroup:
    status = "failed" if g["failed"] else "done" if g["remaining"] == 0 else "running"
    return WorkflowGroup(g["id"], g["name"], g["size"], g["remaining"], g["failed"], status)


def _job(r: asyncpg.Record, names: Mapping[int, str]) -> WorkflowJob:
    parent_groups = tuple(r["parent_groups"])
    return WorkflowJob(
        id=r["job_id"],
        node=r["node"],
        task=r["task"],
        status=None if r["status"] is None else JobStatus(r["status"]),
        parents=tuple(r["parents"]),
        parent_groups=parent_groups,
        parent_group_names=tuple(names.get(g, str(g)) for g in parent_groups),
        group=r["group_id"],
        group_name=None if r["group_id"] is None else names.get(r["group_id"]),
        created_at=r["created_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        attempts=r["attempts"],
        last_error=r["last_error"],
    )
