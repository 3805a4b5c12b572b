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
