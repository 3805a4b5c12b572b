"""docs/workflows.md's example (dependencies, both failure policies) runs as pasted."""

from __future__ import annotations

from ..support.markdown import ROOT, blocks
from ..support.newcomer import Newcomer, fetchval


def test_workflows_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("workflows", ROOT / "docs" / "workflows.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    printed = newcomer.output("python workflows_demo.py").splitlines()
    assert printed == [
        "load is waiting",
        "load: 15",
        "skipped: cancelled: parent job 4 ended failed",
        "report: 1 of 2 parents done",
    ], printed
    waiting = "SELECT count(*) FROM aiopgq.jobs WHERE status = 'waiting'"
    assert fetchval(newcomer.dsn, waiting) == 0


def test_workflow_builder_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("workflow_builder", ROOT / "docs" / "workflows.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    printed = newcomer.output("python builder_demo.py").splitlines()
    assert printed == [
        "enqueued: [('pending', 4), ('waiting', 2)]",
        "nightly done [('done', 6)]",
        "publish: published 100 bytes",
        "cancelled: 2 jobs",
        "[('stopped', 'cancelled'), ('nightly', 'done')]",
        "workflow has a cycle: site.fetch#0 -> site.fetch#1 -> site.fetch#0",
    ], printed
    tree = [line.rstrip() for line in newcomer.output("aiopgq workflow 1").splitlines()]
    assert tree == [
        "workflow 1 nightly: done  (done 6)",
        "└── done      group pages (#1, 4 x site.fetch): done 4",
        "    └── done      site.index #5",
        "        └── done      site.publish #6",
    ], tree
