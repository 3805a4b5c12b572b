"""The fenced code blocks of the markdown pages (README.md, docs/*.md), for the tests that run them.

A fenced block right after a `<!-- run: GROUP -->` line belongs to GROUP; the others have
the group "". A page's `## Title` starts a section, which ends at the next `## `.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_RUN = re.compile(r"<!-- run: (\w+) -->")
_OPEN = re.compile(r"( *)```(\w*)")


@dataclass(frozen=True)
class Block:
    group: str
    language: str
    text: str  # without its fences and without a final newline


def fenced(text: str) -> list[Block]:
    """Every fenced block of a markdown text, in order (an indented fence loses its indent)."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _OPEN.fullmatch(lines[i])
        if not opening:
            i += 1
            continue
        indent, language = len(opening.group(1)), opening.group(2)
        marker = _RUN.fullmatch(lines[i - 1].strip()) if i else None
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        found.append(Block(marker.group(1) if marker else "", language, body))
        i = end + 1
    return found


def blocks(group: str, markdown: Path = README) -> list[Block]:
    """The blocks of GROUP in a markdown file, in order."""
    return [b for b in fenced(markdown.read_text(encoding="utf-8")) if b.group == group]


def section(title: str, markdown: Path = README) -> str:
    """The text of the `## TITLE` section of a markdown file, heading included."""
    text = markdown.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def section_files(title: str, markdown: Path = README) -> dict[str, str]:
    """The blocks of a section whose first line names a file (`# NAME.py` or `# NAME.toml`)."""
    files = {}
    for block in fenced(section(title, markdown)):
        match = re.match(r"# ([\w.]+\.(?:py|toml))\b", block.text)
        if match:
            files[match.group(1)] = block.text + "\n"
    return files
