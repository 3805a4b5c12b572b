"""docs/workflows.md's sequences example (order per key, a failure holding, a cancel
releasing) runs as pasted."""

from __future__ import annotations

from ..support.markdown import ROOT, blocks
from ..support.newcomer import Newcomer, fetchval


def test_sequences_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("sequences", ROOT / "docs" / "workflows.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    printed = newcomer.output("python sequences_demo.py").splitlines()
    assert printed == [
        "['pending', 'waiting', 'waiting']",
        "{'a': ['open'], 'b': ['open', 'deposit']}",
        "deposit on a is waiting",
        "['open', 'deposit']",
    ], printed
    waiting = "SELECT count(*) FROM aiopgq.jobs WHERE status = 'waiting'"
    assert fetchval(newcomer.dsn, waiting) == 0
