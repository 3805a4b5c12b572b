"""Every Python and shell block of the docs runs in some test, or says in the page why not.

A block runs when the line before it is `<!-- run: GROUP -->` and a runner below reads
GROUP; a block that cannot run (it needs your own hosts, runs until stopped, is a
fragment with placeholders) has `<!-- not run: REASON -->` before it instead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("**/*.md"))]
PASTED = {"python", "py", "bash", "sh", "shell", "console", "pycon"}
_FENCE = re.compile(r" *```(\w*).*")
_RUN = re.compile(r"^<!-- run: (\w+) -->$", re.MULTILINE)
_NOT_RUN = re.compile(r"<!-- not run: \S.* -->")

# Each group, and where its runner reads it (the file, and what in it names the group).
RUNNERS = {
    "readme": ("tests/docs/test_docs_examples.py", 'blocks("readme"'),
    "limits": ("tests/docs/test_docs_examples.py", 'blocks("limits"'),
    "periodic": ("tests/docs/test_docs_examples.py", 'blocks("periodic"'),
    "unique": ("tests/docs/test_docs_examples.py", 'blocks("unique"'),
    "outage": ("tests/docs/test_docs_examples.py", 'blocks("outage"'),
    "workflows": ("tests/docs/test_docs_workflows.py", 'blocks("workflows"'),
    "sequences": ("tests/docs/test_docs_sequences.py", 'blocks("sequences"'),
    "steps": ("tests/docs/test_docs_steps.py", 'blocks("steps"'),
    "workflow_builder": ("tests/docs/test_docs_workflows.py", 'blocks("workflow_builder"'),
    "quickstart": ("tests/docs/test_readme.py", 'blocks("quickstart"'),
    "fastapi": ("tests/docs/test_readme.py", 'blocks("fastapi"'),
    "operate": ("tests/docs/test_readme_operate.py", 'blocks("operate"'),
    "handlers": ("tests/docs/test_readme_handlers.py", 'blocks("handlers"'),
    "dashboard": ("tests/docs/test_readme_dashboard.py", 'blocks("dashboard"'),
    # these two read a section's files by their first line, `# NAME.py`
    "testing": ("tests/docs/test_readme_testing.py", 'section_files("An example project"'),
    "sync": ("tests/docs/test_readme_sync.py", 'section_files("Enqueue from synchronous code'),
}


def opening_fences(text: str) -> list[tuple[int, str, str]]:
    """(line number, language, the line before) of each fenced block's opening."""
    found = []
    lines = text.splitlines()
    inside = False
    for number, line in enumerate(lines):
        fence = _FENCE.fullmatch(line)
        if not fence:
            continue
        if inside:
            inside = False
            continue
        inside = True
        before = lines[number - 1].strip() if number else ""
        found.append((number + 1, fence.group(1), before))
    return found


def test_every_pasted_block_runs_or_says_why_not() -> None:
    unmarked, unknown = [], []
    for page in PAGES:
        for number, language, before in opening_fences(page.read_text(encoding="utf-8")):
            where = f"{page.relative_to(ROOT)}:{number}"
            run = _RUN.fullmatch(before)
            if run and run.group(1) not in RUNNERS:
                unknown.append(f"{where}: group {run.group(1)!r} has no runner")
            elif language in PASTED and not run and not _NOT_RUN.fullmatch(before):
                unmarked.append(f"{where} ({language})")
    assert not unknown, "\n".join(unknown)
    assert not unmarked, (
        "these blocks are neither run nor say why not "
        "(`<!-- run: GROUP -->` or `<!-- not run: REASON -->` before them):\n" + "\n".join(unmarked)
    )


def test_every_group_is_read_by_its_runner() -> None:
    used = {m for page in PAGES for m in _RUN.findall(page.read_text(encoding="utf-8"))}
    assert used == set(RUNNERS), f"groups in the pages {sorted(used)}, runners {sorted(RUNNERS)}"
    for group, (runner, needle) in RUNNERS.items():
        assert needle in (ROOT / runner).read_text(encoding="utf-8"), (group, runner)


def test_the_checker_sees_a_block_without_a_marker() -> None:
    page = "text\n\n```python\nprint(1)\n```\n\n<!-- not run: why -->\n```bash\nls\n```\n"
    assert opening_fences(page) == [(3, "python", ""), (8, "bash", "<!-- not run: why -->")]
