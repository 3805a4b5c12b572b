"""The README's "Operating queues" examples run as pasted (tests/support/newcomer.py)."""

from __future__ import annotations

from ..support.markdown import blocks
from ..support.newcomer import Newcomer


def test_operating_examples_run_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("operate")
    assert [b.language for b in found] == ["python", "bash"] * 3
    for block in found:
        newcomer.paste(block)

    pause = newcomer.output("python pause_demo.py").splitlines()
    assert pause == ["paused: ['emails']", "sending to a@example.com"]
    assert newcomer.output("aiopgq pause emails").strip() == "paused queue emails"
    assert (
        newcomer.output("aiopgq status")
        .rstrip()
        .endswith("paused queues: emails (`aiopgq resume QUEUE` to resume)")
    )
    assert newcomer.output("aiopgq resume emails").strip() == "resumed queue emails"

    failed = newcomer.output("python failed_demo.py").splitlines()
    down = "ConnectionError: warehouse down while building 2024-05-01"
    assert failed == ["failed 2", f"1 {down}", f"2 {down}", "1", "done 1 report 2024-05-01 2"]
    listed = newcomer.output("aiopgq jobs --task reports.build").splitlines()
    assert len(listed) == 2 and " done " in listed[1] and listed[1].endswith(down)
    assert newcomer.output("aiopgq retry --all-failed").strip() == "re-queued 0 failed jobs"

    cancel = newcomer.output("python cancel_demo.py").splitlines()
    assert cancel == ["True", "cancelled", "False"]
