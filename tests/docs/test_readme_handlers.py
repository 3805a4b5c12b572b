"""The README's "Handlers" examples run as pasted (tests/support/newcomer.py)."""

from __future__ import annotations

from ..support.markdown import blocks
from ..support.newcomer import Newcomer

EXPECTED = {
    "python context.py": ["2024-06-01: job ", ", attempt 1 of 3"],
    "python results.py": ["0.25\ndone 0.25\nfailed: ZeroDivisionError: division by zero"],
    "python snooze.py": ["shipped apples on attempt 1\n['snooze']\n1 we do not sell pears"],
    "python progress.py": ["2 [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]\n0.9 {'next': 9}"],
    "python exactly_once.py": ["{'charged': 1250}\n1\n"],
    "python fencing.py": ["20\n"],
    "python middleware.py": ["enqueued job ", " of img.resize\nimg.resize took 0.0", "\n512\n"],
}


def test_handlers_examples_run_as_pasted(newcomer: Newcomer) -> None:
    pasted = blocks("handlers")
    assert [b.language for b in pasted] == ["python"] * 7 + ["bash"]
    for block in pasted:
        newcomer.paste(block)
    for command, parts in EXPECTED.items():
        output = newcomer.output(command)
        for part in parts:
            assert part in output, (command, output)
    assert "job " in newcomer.outputs["python context.py"].stderr  # ctx.logger's line
    assert "building the report of 2024-06-01" in newcomer.outputs["python context.py"].stderr
