"""A workflow's graph as an SVG drawing: nodes in layers by depth (a node sits one layer
below its deepest parent), edges from each parent to its child. Plain geometry, no
JavaScript: the page's live refresh redraws it with the statuses of the moment."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiopgq import Workflow, WorkflowJob

NODE_WIDTH = 180
NODE_HEIGHT = 44
GAP_X = 28
GAP_Y = 46
MARGIN = 12
MAX_PER_LAYER = 24  # wider layers are cut, with a note: a page is read, not scrolled sideways


@dataclass(frozen=True)
class Node:
    """One box of the graph: a job, or a group of jobs drawn as one."""

    key: str
    label: str
    detail: str
    status: str
    parents: Sequence[str] = ()
    href: str | None = None


@dataclass
class Placed:
    node: Node
    x: int
    y: int


@dataclass
class Drawing:
    width: int
    height: int
    boxes: list[Placed] = field(default_factory=list)
    edges: list[tuple[int, int, int, int]] = field(default_factory=list)
    hidden: int = 0  # nodes past MAX_PER_LAYER in their layer


def layers(nodes: Sequence[Node]) -> list[list[Node]]:
    """The nodes by depth: roots first; parents not among the nodes are ignored. A
    workflow has no cycles (its enqueue refuses them); a node on one would be put last."""
    by_key = {node.key: node for node in nodes}
    depth: dict[str, int] = {}
    pending = list(nodes)
    while pending:
        rest = []
        for node in pending:
            known = [p for p in node.parents if p in by_key]
            if all(p in depth for p in known):
                depth[node.key] = 1 + max((depth[p] for p in known), default=-1)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # not a DAG: never from an enqueue, drawn anyway
            deepest = max(depth.values(), default=-1) + 1
            depth.update((node.key, deepest) for node in rest)
            break
        pending = rest
    out: list[list[Node]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in nodes:
        out[depth[node.key]].append(node)
    return out


def draw(nodes: Sequence[Node]) -> Drawing:
    """Place every node and route every edge (parent's bottom to child's top)."""
    rows = layers(nodes)
    widest = min(max((len(row) for row in rows), default=0), MAX_PER_LAYER)
    width = 2 * MARGIN + widest * NODE_WIDTH + max(widest - 1, 0) * GAP_X
    height = 2 * MARGIN + len(rows) * NODE_HEIGHT + max(len(rows) - 1, 0) * GAP_Y
    drawing = Drawing(width=max(width, NODE_WIDTH + 2 * MARGIN), height=height)
    where: dict[str, Placed] = {}
    for depth, row in enumerate(rows):
        shown = row[:MAX_PER_LAYER]
        drawing.hidden += len(row) - len(shown)
        row_width = len(shown) * NODE_WIDTH + max(len(shown) - 1, 0) * GAP_X
        left = (drawing.width - row_width) // 2
        for index, node in enumerate(shown):
            placed = Placed(
                node, left + index * (NODE_WIDTH + GAP_X), MARGIN + depth * (NODE_HEIGHT + GAP_Y)
            )
            where[node.key] = placed
            drawing.boxes.append(placed)
    for placed in drawing.boxes:
        for parent in placed.node.parents:
            above = where.get(parent)
            if above is not None:
                drawing.edges.append(
                    (
                        above.x + NODE_WIDTH // 2,
                        above.y + NODE_HEIGHT,
                        placed.x + NODE_WIDTH // 2,
                        placed.y,
                    )
                )
    return drawing


def workflow_nodes(workflow: Workflow, base: str) -> list[Node]:
    """A workflow's jobs as nodes: one per single job, one per group (its members drawn
    as one box with their counts: a group of 10,000 is one box, not 10,000)."""
    members: dict[int, list[WorkflowJob]] = {}
    singles: list[WorkflowJob] = []
    for job in workflow.jobs:
        if job.group is None:
            singles.append(job)
        else:
            members.setdefault(job.group, []).append(job)
    group_of = {job.id: job.group for jobs in members.values() for job in jobs}

    def parents(job: WorkflowJob) -> list[str]:
        keys = [f"g{group_of[p]}" if p in group_of else f"j{p}" for p in job.parents]
        keys += [f"g{g}" for g in job.parent_groups]
        return list(dict.fromkeys(keys))

    nodes: dict[int, Node] = {}  # by builder node index: the order the workflow was built
    for job in singles:
        status = job.status.value if job.status is not None else "pruned"
        nodes[job.node] = Node(
            key=f"j{job.id}",
            label=job.task or "(pruned)",
            detail=f"#{job.id} · {status}",
            status=status,
            parents=parents(job),
            href=f"{base}/jobs/{job.id}",
        )
    for group in workflow.groups:
        jobs = members.get(group.id, [])
        counts = Counter(j.status.value if j.status is not None else "pruned" for j in jobs)
        status = _group_status(group.status, counts)
        done = counts.get("done", 0)
        nodes[jobs[0].node if jobs else -group.id] = Node(
            key=f"g{group.id}",
            label=f"{group.name} ({jobs[0].task})" if jobs and jobs[0].task else group.name,
            detail=f"group · {done:,}/{group.size:,} done"
            + (f" · {group.failed:,} failed" if group.failed else ""),
            status=status,
            parents=parents(jobs[0]) if jobs else (),
        )
    return [nodes[index] for index in sorted(nodes)]


def _group_status(status: str, counts: Counter[str]) -> str:
    """A group's colour: failed or done as the group says, else what its members do."""
    if status in ("done", "failed"):
        return status
    if counts.get("running"):
        return "running"
    if counts.get("pending"):
        return "pending"
    return "waiting" if counts.get("waiting") else status
