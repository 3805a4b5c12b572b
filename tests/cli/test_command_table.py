"""The command table of docs/cli.md names every command of the parser, and only those."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from aiopgq._cli import _parser

README = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def parser_commands() -> set[str]:
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(action.choices)


def table_commands() -> set[str]:
    """The commands of the README's table: the fenced block whose every line is an
    `aiopgq COMMAND ...` line; `aiopgq a | b | c` names three."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", README.read_text(), re.S | re.M)
    tables = [
        block
        for block in blocks
        if all(line.startswith("aiopgq ") for line in block.splitlines() if line.strip())
        and "aiopgq migrate " in block
    ]
    assert len(tables) == 1, "the README has one command table"
    named: set[str] = set()
    for line in tables[0].splitlines():
        head = re.split(r"\s{2,}", line.removeprefix("aiopgq ").strip())[0]
        head = re.sub(r"\[[^]]*\]", "", head)  # options such as [--enable | --disable]
        named.update(word.split()[0] for word in head.split(" | "))
    return named


def test_the_readme_command_table_names_every_command() -> None:
    table, parser = table_commands(), parser_commands()
    assert not parser - table, f"commands missing from the README's table: {parser - table}"
    assert not table - parser, f"the README's table names no such command: {table - parser}"
