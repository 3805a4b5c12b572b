"""docs/durable-steps.md's example (a three-step import, a reminder that sleeps, an order
that waits for a payment) runs as pasted."""

from __future__ import annotations

from ..support.markdown import ROOT, blocks
from ..support.newcomer import Newcomer


def test_durable_steps_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("steps", ROOT / "docs" / "durable-steps.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    printed = newcomer.output("python steps_demo.py").splitlines()
    assert printed[:3] == ["files.import done", "users.remind pending", "shop.order waiting"]
    assert printed[3].startswith("event payment:42 (until ")
    assert printed[4:8] == [
        "woke 1",
        "files.import 3",
        "users.remind reminded",
        "shop.order paid 1200",
    ], printed
    assert printed[8] == (
        "['download s3://bucket/rows.csv', 'load', 'parse', 'remind ada', 'reserve 42', "
        "'ship 42', 'welcome ada']"
    )
