"""MkDocs hooks: the CLI reference rendered from the argparse parser, and the benchmark plots.

`<!-- cli-reference -->` in a page becomes the `--help` of `aiopgq` and of every
subcommand, as the installed code prints it; nothing of it is copied by hand.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- cli-reference -->"
PLOTS = ROOT / "benchmarks" / "results"


def _help(parser: argparse.ArgumentParser) -> str:
    # A fixed width, so the page does not depend on the terminal that builds it.
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "96"
    try:
        return parser.format_help().rstrip()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def cli_reference() -> str:
    """Markdown for `aiopgq --help` and each `aiopgq COMMAND --help`, in the parser's order."""
    from aiopgq._cli import _parser

    parser = _parser()
    parts = ["## `aiopgq`", "", "```text", _help(parser), "```"]
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += ["", f"## `aiopgq {name}`", "", "```text", _help(sub), "```"]
    return "\n".join(parts) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown


def on_files(files: Files, config: Any) -> Files:
    # The benchmark plots live next to their data, outside docs/; the site serves them.
    for plot in sorted(PLOTS.glob("*.png")):
        files.append(
            File.generated(config, f"benchmarks/results/{plot.name}", abs_src_path=str(plot))
        )
    return files
