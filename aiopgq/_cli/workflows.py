"""`aiopgq workflow ID` (a workflow's graph as a tree, with statuses; rich, the `ops`
extra) and `aiopgq workflows` (the most recent ones)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import Workflow, WorkflowJob
from .common import AddCommand, UsageError, queue_of

_PIPE_WIDTH = 120  # not on a terminal: wide enough for a group's counts
_STYLES = {
    "done": "green",
    "failed": "red",
    "cancelled": "yellow",
    "running": "cyan",
    "pending": "white",
    "waiting": "dim",
}
_ORDER = ("running", "pending", "waiting", "done", "failed", "cancelled", "pruned")


def register(add: AddCommand) -> None:
    one = add("workflow", "show a workflow's graph as a tree, with each job's status")
    one.add_argument("id", type=int, metavar="ID", help="the workflow's id")
    one.set_defaults(run=show_workflow)
    recent = add("workflows", "list the most recent workflows with their jobs' counts")
    recent.add_argument("--limit", type=int, default=20, metavar="N", help="at most N")
    recent.set_defaults(run=list_workflows)


def _console() -> Any:
    try:
        from rich.console import Console
    except ImportError:
        raise UsageError(
            "aiopgq workflow needs rich: pip install -e '.[ops]' in the aiopgq clone"
        ) from None
    return Console() if sys.stdout.isatty() else Console(width=_PIPE_WIDTH)


async def show_workflow(args: argparse.Namespace) -> int:
    console = _console()
    async with queue_of(args) as queue:
        await queue.check_schema()
        workflow = await queue.get_workflow(args.id)
    console.print(tree(workflow))
    return 0


async def list_workflows(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    console = _console()
    async with queue_of(args) as queue:
        await queue.check_schema()
        found = await queue.list_workflows(limit=args.limit)
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("id", "name", "status", "jobs", "created", "counts"):
        table.add_column(column, justify="right" if column in ("id", "jobs") else "left")
    for wf in found:
        table.add_row(
            str(wf.id),
            wf.name,
            f"[{_STYLES.get(wf.status, 'white')}]{wf.status}[/]",
            str(sum(wf.counts.values())),
            wf.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            counts_text(wf.counts),
        )
    console.print(table if found else "(no workflows)")
    return 0


def counts_text(counts: dict[str, int]) -> str:
    known = [s for s in _ORDER if s in counts] + sorted(set(counts) - set(_ORDER))
    return ", ".join(f"{s} {counts[s]}" for s in known)


def tree(workflow: Workflow) -> Any:
    """The workflow as a rich Tree: each job (or group, as one line with its members'
    counts) under its first parent; under its other parents a line that points back."""
    from rich.tree import Tree

    units, parents = _units(workflow)
    children: dict[tuple[str, int], list[tuple[str, int]]] = {key: [] for key in units}
    for key, its in parents.items():
        for parent in its:
            children[parent].append(key)
    style = _STYLES.get(workflow.status, "white")
    root = Tree(
        f"[bold]workflow {workflow.id}[/] {workflow.name}: [{style}]{workflow.status}[/]"
        f"  ({counts_text(workflow.counts)})"
    )
    shown: set[tuple[str, int]] = set()

    def grow(branch: Any, key: tuple[str, int]) -> None:
        if key in shown:
            branch.add(f"[dim]{_label(units[key], brief=True)} (shown above)[/]")
            return
        shown.add(key)
        node = branch.add(_label(units[key]))
        for child in children[key]:
            grow(node, child)

    for key in units:
        if not parents[key]:
            grow(root, key)
    return root


Key = tuple[str, int]


def _units(workflow: Workflow) -> tuple[dict[Key, Any], dict[Key, list[Key]]]:
    """The tree's units in node order, a job ("job", id) or a group ("group", id) with its
    members, and each unit's parents."""
    units: dict[tuple[str, int], Any] = {}
    parents: dict[tuple[str, int], list[tuple[str, int]]] = {}
    groups = {g.id: g for g in workflow.groups}
    for job in workflow.jobs:
        key = ("group", job.group) if job.group is not None else ("job", job.id)
        if key not in units:
            units[key] = (groups[job.group], []) if job.group is not None else job
            parents[key] = [("job", p) for p in job.parents] + [
                ("group", g) for g in job.parent_groups
            ]
        if job.group is not None:
            units[key][1].append(job)
    return units, parents


def _label(unit: Any, brief: bool = False) -> str:
    if isinstance(unit, WorkflowJob):
        status = unit.status.value if unit.status is not None else "pruned"
        text = f"{unit.task} #{unit.id}"
        if brief:
            return text
        error = f"  [dim]{_first_line(unit.last_error)}[/]" if unit.last_error else ""
        return f"[{_STYLES.get(status, 'white')}]{status:<9}[/] {text}{error}"
    group, members = unit
    text = f"group {group.name} (#{group.id}, {group.size} x {members[0].task})"
    if brief:
        return text
    counts: dict[str, int] = {}
    for job in members:
        status = job.status.value if job.status is not None else "pruned"
        counts[status] = counts.get(status, 0) + 1
    return (
        f"[{_STYLES.get(group.status, 'white')}]{group.status:<9}[/] {text}: {counts_text(counts)}"
    )


def _first_line(text: str | None) -> str:
    line = (text or "").strip().splitlines()[-1:] or [""]
    return line[0][:80]
