"""The README's example and the guide pages' examples not run elsewhere, pasted as written."""

from __future__ import annotations

from ..support.markdown import README, ROOT, blocks
from ..support.newcomer import Newcomer, fetchval

DOCS = ROOT / "docs"


def test_the_readme_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("readme", README)
    assert [b.language for b in found] == ["python", "bash"]
    assert len(found[0].text.splitlines()) <= 30, "the README's example is at most 30 lines"
    for block in found:
        newcomer.paste(block)
    assert newcomer.output("python hello.py") == "3\n"


def test_limits_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("limits", DOCS / "limits.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    settings = newcomer.output("python limits.py")
    assert "concurrency=3" in settings and "rate=None" in settings, settings
    assert "key_concurrency=2" in settings, settings
    done = "SELECT count(*) FROM aiopgq.jobs WHERE status = 'done'"
    assert fetchval(newcomer.dsn, done) == 27  # 20 + 3 + 3 + 1: every one ran
    shown = newcomer.output("aiopgq queue exports --rate none")
    assert "exports" in shown, shown


def test_periodic_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("periodic", DOCS / "periodic.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    printed = newcomer.output("python periodic_demo.py")
    assert "ping " in printed, printed  # every 2 s, for 5 s
    assert "cache.ping */2 * * * * * last" in printed, printed
    assert "reports.refresh */5 * * * * last" in printed, printed
    listed = newcomer.output("aiopgq schedules")
    assert "cache.ping" in listed and "reports.refresh" in listed, listed


def test_unique_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("unique", DOCS / "unique.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    printed = newcomer.output("python unique_demo.py").splitlines()
    assert printed[0].startswith("already enqueued: 1 ") and "'total': '10.50'" in printed[0]
    assert printed[1].startswith("receipt for order 42 10.50"), printed
    assert printed[-1].startswith("one digest job: "), printed
    digests = "SELECT count(*) FROM aiopgq.jobs WHERE task = 'mail.digest'"
    assert fetchval(newcomer.dsn, digests) == 1


def test_outage_example_runs_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("outage", DOCS / "tasks.md")
    assert [b.language for b in found] == ["python", "bash"]
    for block in found:
        newcomer.paste(block)
    pending = "SELECT count(*) FROM aiopgq.jobs WHERE task = 'orders.ship'"
    assert fetchval(newcomer.dsn, pending) == 3
    assert "pending" in newcomer.output("aiopgq status")
