"""Workflows: a graph of jobs built in Python (WorkflowBuilder) and enqueued in one
transaction, and the reads and cancel of a workflow (Queue.get_workflow and the rest).

The graph's rows, the groups' counters and why they hold under concurrency:
sql/functions/workflows.sql.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from .._db.connection import Connection
from .._db.migrations import missing_schema_as_error
from .._enqueue_options import ON_PARENT_FAILURE, JobOptions, TaskDefaults
from .._errors import WorkflowNotFound
from .._models import Job, JobStatus
from .._task import Task
from .core import Core
from .inserts import insert_batch
from .prepare import prepare_many

if TYPE_CHECKING:
    from .enqueue import Enqueue
    from .hooks import Hooks

# The job options a workflow's node takes (the others need a job of their own:
# keys, a connection, depends_on outside the builder).
NODE_OPTIONS = frozenset(
    {"queue", "run_at", "delay", "priority", "max_attempts", "concurrency_key", "on_parent_failure"}
)
FINISHED = ("done", "failed", "cancelled")


class WorkflowNode:
    """A node of a WorkflowBuilder: one job (`add`) or a group (`add_many`), usable in the
    `depends_on` of later nodes of the same builder (a group as ONE parent: its dependents
    wait until every member is done).

    >>> extract = wf.add(fetch, "a")
    >>> wf.add(load, depends_on=[extract])

    Attributes:
        label: how errors name it ("task#index", or the group's name).
        is_group: True for a node of add_many.
    """

    __slots__ = ("_builder", "_index", "is_group", "label")

    def __init__(self, builder: WorkflowBuilder, index: int, label: str, is_group: bool) -> None:
        self._builder = builder
        self._index = index
        self.label = label
        self.is_group = is_group

    def __repr__(self) -> str:
        return f"<WorkflowNode {self.label}>"

    def after(self, *parents: WorkflowNode) -> WorkflowNode:
        """Add parents to this node (of the same builder); returns the node. Parents
        added this way may form a cycle: `enqueue()` refuses it, naming its nodes.

        >>> load.after(extract, transform)

        Args:
            *parents: nodes of the same builder this one waits for.

        Returns:
            This node.

        Raises:
            TypeError: a parent that is not a node of this builder.
        """
        self._builder._spec(self).parents.extend(self._builder._own(parents))
        return self


@dataclass
class _Spec:
    task: str
    known: TaskDefaults | None
    payloads: list[dict[str, Any]]
    options: JobOptions
    parents: list[WorkflowNode]
    node: WorkflowNode


class WorkflowBuilder:
    """A workflow being built: `add` and `add_many` make its nodes, `enqueue()` writes
    them all in one transaction (Queue.workflow makes one).

    >>> wf = queue.workflow("nightly")
    >>> a = wf.add(fetch, "x"); g = wf.add_many(fetch, [{"url": u} for u in urls], depends_on=[a])
    >>> wid = await wf.enqueue()
    """

    def __init__(self, workflows: Workflows, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a workflow's name must be a non-empty string, got {name!r}")
        self._workflows = workflows
        self.name = name
        self._specs: list[_Spec] = []
        self._enqueued = False

    def add(
        self,
        task: Task[Any, Any] | str,
        /,
        *args: Any,
        depends_on: Iterable[WorkflowNode] | WorkflowNode | None = None,
        **kwargs: Any,
    ) -> WorkflowNode:
        """One job of `task` (a Task, or a task's name with keyword arguments only).

        >>> report = wf.add(build_report, "2026-01-01", depends_on=[extract], priority=5)

        Args:
            task: the Task, or the task's name.
            *args: the task's positional arguments (a Task only).
            depends_on: nodes of this builder the job waits for.
            **kwargs: the task's keyword arguments, and the job options queue, run_at,
                delay, priority, max_attempts, concurrency_key and on_parent_failure.

        Returns:
            The node, for the `depends_on` of later nodes.

        Raises:
            TypeError: arguments that do not fit the task, positional arguments with a
                task name, or a parent that is not a node of this builder.
        """
        picked = {k: kwargs.pop(k) for k in NODE_OPTIONS & kwargs.keys()}
        options: JobOptions = picked  # type: ignore[assignment]  # keys checked
        name, known = _task_of(task)
        if known is not None and isinstance(task, Task):
            payload = task.bind(args, kwargs)
        elif args:
            raise TypeError(
                f"task {name}: positional arguments need the Task itself (a task's name "
                "takes keyword arguments only)"
            )
        else:
            payload = dict(kwargs)
        label = f"{name}#{len(self._specs)}"
        return self._node(name, known, [payload], options, depends_on, label, False)

    def add_many(
        self,
        task: Task[Any, Any] | str,
        arguments: Iterable[Mapping[str, Any]],
        /,
        *,
        depends_on: Iterable[WorkflowNode] | WorkflowNode | None = None,
        name: str | None = None,
        **options: Any,
    ) -> WorkflowNode:
        """A group: one job of `task` per dict of keyword arguments, usable in `depends_on`
        as ONE parent (its dependents wait until every member is done; a member that ends
        failed or cancelled counts as the group failing). Each member's result is in its
        dependents' `ctx.parent_results()`, by the member's job id.

        >>> pages = wf.add_many(fetch, [{"url": u} for u in urls], name="pages")

        Args:
            task: the Task, or the task's name.
            arguments: one dict of the task's keyword arguments per member (at least one).
            depends_on: nodes of this builder every member waits for.
            name: the group's name (default: "task[index]").
            **options: job options for every member: queue, run_at, delay, priority,
                max_attempts, concurrency_key, on_parent_failure.

        Returns:
            The group's node.

        Raises:
            TypeError: an option a workflow's node does not take, or a parent that is
                not a node of this builder.
            ValueError: no members.
        """
        unknown = options.keys() - NODE_OPTIONS
        if unknown:
            raise TypeError(
                f"add_many() got options a workflow's jobs do not take: {sorted(unknown)} "
                f"(it takes {sorted(NODE_OPTIONS)})"
            )
        task_name, known = _task_of(task)
        payloads = [dict(item) for item in arguments]
        if not payloads:
            raise ValueError(f"add_many({task_name}): a group needs at least one member")
        label = name or f"{task_name}[{len(self._specs)}]"
        job_options: JobOptions = dict(options)  # type: ignore[assignment]  # keys checked
        return self._node(task_name, known, payloads, job_options, depends_on, label, True)

    async def enqueue(self, connection: Connection | None = None) -> int:
        """Write every job of the workflow, its groups and edges, in one transaction
        (inside yours when you give `connection`); returns the workflow's id.

        >>> wid = await wf.enqueue()
        >>> async with conn.transaction(): wid = await wf.enqueue(connection=conn)

        Args:
            connection: a connection of yours: the workflow commits with its transaction.

        Returns:
            The workflow's id (for `Queue.get_workflow` and the others).

        Raises:
            ValueError: a cycle (its nodes named), an empty workflow, or a builder
                enqueued already.
            TypeError: arguments that do not fit a task.
            QueueNotOpen: the queue is not open and no connection was given.
        """
        if self._enqueued:
            raise ValueError(f"workflow {self.name!r} was enqueued already: build a new one")
        if not self._specs:
            raise ValueError(f"workflow {self.name!r} has no jobs")
        order = _topological(self._specs)
        wid = await self._workflows.enqueue(self.name, [self._specs[i] for i in order], connection)
        self._enqueued = True
        return wid

    def _node(
        self,
        task: str,
        known: TaskDefaults | None,
        payloads: list[dict[str, Any]],
        options: JobOptions,
        depends_on: Iterable[WorkflowNode] | WorkflowNode | None,
        label: str,
        is_group: bool,
    ) -> WorkflowNode:
        if self._enqueued:
            raise ValueError(f"workflow {self.name!r} was enqueued already: build a new one")
        policy = options.get("on_parent_failure", "cancel")
        if policy not in ON_PARENT_FAILURE:
            raise ValueError(f"on_parent_failure must be 'cancel' or 'run', got {policy!r}")
        if isinstance(depends_on, WorkflowNode):
            depends_on = [depends_on]
        parents = self._own(depends_on or ())
        node = WorkflowNode(self, len(self._specs), label, is_group)
        self._specs.append(_Spec(task, known, payloads, options, parents, node))
        return node

    def _own(self, parents: Iterable[Any]) -> list[WorkflowNode]:
        """The parents, each a node of this builder (TypeError otherwise)."""
        checked = []
        for parent in parents:
            if not isinstance(parent, WorkflowNode):
                raise TypeError(
                    f"workflow {self.name!r}: depends_on takes nodes of this workflow "
                    f"(returned by add/add_many), got {parent!r}; a job outside it is a "
                    "parent through depends_on= of a plain enqueue"
                )
            if parent._builder is not self:
                raise TypeError(
                    f"workflow {self.name!r}: node {parent.label} belongs to another "
                    f"workflow builder ({parent._builder.name!r}): a workflow's jobs can "
                    "depend only on its own nodes"
                )
            checked.append(parent)
        return checked

    def _spec(self, node: WorkflowNode) -> _Spec:
        return self._specs[node._index]


def _task_of(task: Task[Any, Any] | str) -> tuple[str, TaskDefaults | None]:
    if isinstance(task, Task):
        return task.name, task
    if isinstance(task, str) and task:
        return task, None
    raise TypeError(f"a workflow's node takes a Task or a task's name, got {task!r}")


def _topological(specs: Sequence[_Spec]) -> list[int]:
    """The nodes' indexes, parents first (Kahn's algorithm, ties by index); ValueError
    naming the nodes of a cycle."""
    children: list[list[int]] = [[] for _ in specs]
    waiting = [0] * len(specs)
    for spec in specs:
        for parent in {p._index for p in spec.parents}:
            children[parent].append(spec.node._index)
            waiting[spec.node._index] += 1
    ready = [i for i, n in enumerate(waiting) if n == 0]
    order: list[int] = []
    while ready:
        i = ready.pop()
        order.append(i)
        for child in children[i]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(order) < len(specs):
        cycle = _a_cycle(specs, {i for i, n in enumerate(waiting) if n > 0})
        raise ValueError("workflow has a cycle: " + " -> ".join(specs[i].node.label for i in cycle))
    return order


def _a_cycle(specs: Sequence[_Spec], left: set[int]) -> list[int]:
    """One cycle among the nodes `left` (each has a parent in `left`): walk parents
    until a node repeats."""
    start = min(left)
    path: list[int] = []
    seen: dict[int, int] = {}
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(p._index for p in specs[node].parents if p._index in left)
    cycle = path[seen[node] :]
    cycle.reverse()  # parents first: a -> b reads "b waits for a"
    return [*cycle, cycle[0]]


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

    async def enqueue(self, name: str, specs: list[_Spec], connection: Connection | None) -> int:
        """The specs (parents first) as jobs, then their graph, in one transaction."""
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
        group_of = {
            spec.node._index: k
            for k, spec in enumerate((s for s in specs if s.node.is_group), start=1)
        }
        groups = [s.node.label for s in specs if s.node.is_group]

        async def op(conn: Connection) -> tuple[int, list[Job]]:
            async with conn.transaction():
                made = [await insert_batch(conn, core.sql, b) for b in batches]
                jobs: list[int] = []
                nodes: list[int] = []
                member_of: list[int | None] = []
                policies: list[str] = []
                children: list[int] = []
                parents: list[int] = []
                for n, (spec, batch_jobs) in enumerate(zip(specs, made, strict=True)):
                    k = group_of.get(spec.node._index)
                    policy = spec.options.get("on_parent_failure", "cancel")
                    edges = [
                        -group_of[p._index] if p.is_group else made[position[p._index]][0].id
                        for p in dict.fromkeys(spec.parents)
                    ]
                    for job in batch_jobs:
                        jobs.append(job.id)
                        nodes.append(n)
                        member_of.append(k)
                        policies.append(policy)
                        children.extend([job.id] * len(edges))
                        parents.extend(edges)
                wid = await conn.fetchval(
                    core.sql.create_workflow,
                    name,
                    jobs,
                    nodes,
                    member_of,
                    policies,
                    groups,
                    children,
                    parents,
                )
            return int(wid), [job for batch_jobs in made for job in batch_jobs]

        with missing_schema_as_error(core.schema):
            wid, jobs = await core.run(connection, op)
        if self._hooks.enqueue_hooks:
            await self._hooks.enqueued(jobs)
        return wid

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
