"""The workflow builder: nodes (one job, or a group) and their parents, checked and put
in a topological order in Python before Queue.workflow's enqueue writes them
(aiopgq/_client/workflows.py)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._db.connection import Connection
from .._enqueue_options import ON_PARENT_FAILURE, JobOptions, TaskDefaults
from .._task import Task

# The job options a workflow's node takes (the others need a job of their own:
# keys, a connection, depends_on outside the builder).
NODE_OPTIONS = frozenset(
    {"queue", "run_at", "delay", "priority", "max_attempts", "concurrency_key", "on_parent_failure"}
)


class GraphWriter(Protocol):
    """What writes a built workflow (aiopgq/_client/workflows.py's Workflows)."""

    async def enqueue(
        self, name: str, specs: list[NodeSpec], connection: Connection | None
    ) -> int: ...


class WorkflowNode:
    """A node of a WorkflowBuilder: one job (`add`) or a group (`add_many`), usable in the
    `depends_on` of later nodes of the same builder (a group as ONE parent: its dependents
    wait until every member is done).

    >>> extract = wf.add(fetch, "a")
    >>> wf.add(load, depends_on=[extract])

    Args:
        builder: its WorkflowBuilder (nodes are made by `add` and `add_many`).
        index: its index in the builder.
        label: how errors name it.
        is_group: True for a group.

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
class NodeSpec:
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

    Args:
        workflows: what writes it (the Queue's; build one with `Queue.workflow`).
        name: the workflow's name.

    Attributes:
        name: the workflow's name.

    Raises:
        ValueError: an empty name.
    """

    def __init__(self, workflows: GraphWriter, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a workflow's name must be a non-empty string, got {name!r}")
        self._workflows = workflows
        self.name = name
        self._specs: list[NodeSpec] = []
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
        self._specs.append(NodeSpec(task, known, payloads, options, parents, node))
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

    def _spec(self, node: WorkflowNode) -> NodeSpec:
        return self._specs[node._index]


def _task_of(task: Task[Any, Any] | str) -> tuple[str, TaskDefaults | None]:
    if isinstance(task, Task):
        return task.name, task
    if isinstance(task, str) and task:
        return task, None
    raise TypeError(f"a workflow's node takes a Task or a task's name, got {task!r}")


def _topological(specs: Sequence[NodeSpec]) -> list[int]:
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
        i = heapq.heappop(ready)
        order.append(i)
        for child in children[i]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    if len(order) < len(specs):
        cycle = _a_cycle(specs, {i for i, n in enumerate(waiting) if n > 0})
        raise ValueError("workflow has a cycle: " + " -> ".join(specs[i].node.label for i in cycle))
    return order


def _a_cycle(specs: Sequence[NodeSpec], left: set[int]) -> list[int]:
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
    first = cycle.index(min(cycle))
    cycle = cycle[first:] + cycle[:first]
    return [*cycle, cycle[0]]
