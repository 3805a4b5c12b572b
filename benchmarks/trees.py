"""Which checkout's `aiopgq` package a process imports, and the commit of a checkout.

The harness (`benchmarks`) always comes from the current tree. A child process started
with AIOPGQ_BENCH_TREE=DIR imports `aiopgq` from DIR instead: `import_aiopgq()` puts DIR
first on `sys.path` before anything imports aiopgq. Putting DIR on PYTHONPATH is not
enough: `python -m` puts the current directory (the current tree, which holds an
`aiopgq/` too) in front of it, and the editable install adds another copy behind it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TREE_ENV = "AIOPGQ_BENCH_TREE"
_seen: dict[str, set[str]] = {}


def check_tree(path: Path) -> Path:
    """`path` made absolute; it must be a checkout of the aiopgq repository."""
    tree = path.expanduser().resolve()
    if not (tree / "aiopgq" / "__init__.py").is_file():
        raise SystemExit(f"{path} holds no aiopgq/ package: give a checkout of the aiopgq repo")
    return tree


def git_describe(tree: Path = REPO_ROOT) -> str:
    """Short commit of a tree, `+dirty` with uncommitted changes under aiopgq/ or sql/."""
    try:
        head = _git(tree, "rev-parse", "--short", "HEAD")
        dirty = _git(tree, "status", "--porcelain", "--", "aiopgq", "sql")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def git_commit(tree: Path) -> str:
    """Full commit of a tree (`git -C tree rev-parse HEAD`)."""
    try:
        return _git(tree, "rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()


def child_tree() -> Path | None:
    """The tree whose aiopgq this process imports, if it is not the current one."""
    tree = os.environ.get(TREE_ENV)
    return Path(tree) if tree else None


def import_aiopgq() -> None:
    """In a child, first thing: import aiopgq from AIOPGQ_BENCH_TREE when it is set.

    Fails when aiopgq was already imported or came from elsewhere (the harness would then
    measure the wrong code without noticing)."""
    tree = child_tree()
    if tree is None:
        return
    if "aiopgq" in sys.modules:
        raise ImportError(f"aiopgq was imported before {TREE_ENV} was applied")
    sys.path.insert(0, str(tree))
    import aiopgq

    origin = Path(aiopgq.__file__ or "").resolve()
    if origin.parent != tree.resolve() / "aiopgq":
        raise ImportError(f"{TREE_ENV}={tree} but aiopgq came from {origin}")
    print(f"aiopgq imported from {origin}", file=sys.stderr, flush=True)


def imported_aiopgq() -> str | None:
    """File of the aiopgq package this process imported (None if it imported none)."""
    module = sys.modules.get("aiopgq")
    return getattr(module, "__file__", None) if module is not None else None


def note_import(system: str, origin: str | None) -> None:
    """Parent: remember which aiopgq a child of `system` reported at `ready`."""
    if origin is not None:
        _seen.setdefault(system, set()).add(origin)


def imports_seen() -> dict[str, list[str]]:
    """Per system, the aiopgq files its children imported (so far in this run)."""
    return {system: sorted(files) for system, files in _seen.items()}
