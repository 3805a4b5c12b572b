"""The package's shape: imports point one way, rooms keep to themselves, modules stay small.

Every import counts, also those under TYPE_CHECKING and inside functions: a circle
hidden from the interpreter still ties the modules together for a reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "aiopgq"

# Rooms and what each may import of aiopgq besides itself (modules, or whole rooms).
FOUNDATION = {"aiopgq._errors", "aiopgq._identifiers"}
ALLOWED_OUTSIDE = {
    "aiopgq._db": FOUNDATION,
    "aiopgq._embedded": FOUNDATION,
    # doctor, top, workers: read the database through _db, never the client or worker
    "aiopgq._ops": FOUNDATION | {"aiopgq._db", "aiopgq._models"},
}
# The vocabulary: what a job, a task, an option, a payload is. It builds on _db only.
VOCABULARY = {
    "aiopgq._errors",
    "aiopgq._identifiers",
    "aiopgq._models",
    "aiopgq._enqueue_options",
    "aiopgq._payload",
    "aiopgq._task",
    "aiopgq._schedule",
    "aiopgq._context",
    "aiopgq._steps",
    "aiopgq._observer",
    "aiopgq._retry",
    "aiopgq._version",
    "aiopgq._display",
}
# The worker runtime sees the client through Protocols (aiopgq._worker.contracts).
WORKER_NEVER_IMPORTS = {"aiopgq", "aiopgq._task"}
WORKER_NEVER_IMPORTS_ROOMS = {"aiopgq._client", "aiopgq._cli", "aiopgq.dashboard"}
MAX_LINES = 400
# The public client reads as one class: every method of Queue is in this one file; so
# does a handler's JobContext (its durable steps' bodies are in aiopgq._steps).
LONGER_ALLOWED = {"aiopgq._client.queue", "aiopgq._context"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def imports_of(name: str) -> Iterator[str]:
    """The aiopgq modules `name` imports explicitly (parents' __init__ run implicitly
    are not counted: the package root re-exports everything by design)."""
    package = name if is_package(name) else name.rpartition(".")[0]
    yield from imports_in(MODULES[name].read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str) -> Iterator[str]:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "aiopgq" or alias.name.startswith("aiopgq."):
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not (target == "aiopgq" or target.startswith("aiopgq.")):
                continue
            submodules = [
                f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES
            ]
            if submodules:
                yield from submodules
            if len(submodules) < len(node.names):
                yield target


GRAPH = {name: sorted(set(imports_of(name)) - {name}) for name in MODULES}


def room_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2])


def test_every_import_resolves_to_a_module() -> None:
    unknown = {(m, t) for m, targets in GRAPH.items() for t in targets if t not in MODULES}
    assert not unknown


def test_no_import_circle() -> None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in GRAPH[node]:
            if state.get(nxt) == 1:
                circle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import circle: " + " -> ".join(circle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in GRAPH:
        if name not in state:
            visit(name)


@pytest.mark.parametrize("room", sorted(ALLOWED_OUTSIDE))
def test_lower_rooms_import_nothing_above_them(room: str) -> None:
    wrong = {
        (m, t)
        for m, targets in GRAPH.items()
        if room_of(m) == room
        for t in targets
        if room_of(t) != room
        and t not in ALLOWED_OUTSIDE[room]
        and room_of(t) not in ALLOWED_OUTSIDE[room]
    }
    assert not wrong, f"{room} must import only itself and {sorted(ALLOWED_OUTSIDE[room])}"


def test_worker_runtime_never_imports_the_client() -> None:
    wrong = {
        (m, t)
        for m, targets in GRAPH.items()
        if room_of(m) == "aiopgq._worker"
        for t in targets
        if t in WORKER_NEVER_IMPORTS or room_of(t) in WORKER_NEVER_IMPORTS_ROOMS
    }
    assert not wrong, "the worker sees Queue and Task through aiopgq._worker.contracts"


def test_the_vocabulary_imports_neither_the_client_nor_the_runtime() -> None:
    wrong = {
        (m, t)
        for m in VOCABULARY
        for t in GRAPH[m]
        if t not in VOCABULARY and room_of(t) != "aiopgq._db"
    }
    assert not wrong, "the model builds on itself and _db only: move the shared piece down"


def test_the_cli_reaches_the_client_and_the_worker_through_public_names() -> None:
    wrong = {
        (m, t)
        for m, targets in GRAPH.items()
        if room_of(m) == "aiopgq._cli"
        for t in targets
        if room_of(t) == "aiopgq._client" or t == "aiopgq._worker.worker"
    }
    assert not wrong, "the CLI is a client of the public API: import Queue, Worker from aiopgq"


def test_benchmarks_use_public_names_only() -> None:
    root = PACKAGE.parent / "benchmarks"
    wrong = {
        (path.name, target)
        for path in sorted(root.rglob("*.py"))
        for target in imports_in(path.read_text(encoding="utf-8"), "benchmarks")
        if any(part.startswith("_") for part in target.split(".")[1:])
    }
    assert not wrong, "benchmarks measure what users run: give what they need a public name"


def test_no_two_modules_outside_the_cli_share_a_name() -> None:
    seen: dict[str, list[str]] = {}
    for name in MODULES:
        if room_of(name) != "aiopgq._cli" and not is_package(name):
            seen.setdefault(name.rpartition(".")[2].lstrip("_"), []).append(name)
    shared = {short: names for short, names in seen.items() if len(names) > 1}
    assert not shared, "one name, one module: name one of them after its role"


def test_the_dashboard_uses_only_the_public_api() -> None:
    wrong = {
        (m, t)
        for m, targets in GRAPH.items()
        if room_of(m) == "aiopgq.dashboard"
        for t in targets
        # aiopgq._display: how a job's JSON is shown, shared with the CLI's job views
        if room_of(t) != "aiopgq.dashboard" and t not in ("aiopgq", "aiopgq._display")
    }
    assert not wrong, "the dashboard is a client of the public API: import from aiopgq only"


def test_the_walk_counts_type_checking_and_function_local_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .._client.queue import Queue\n"
        "def f():\n    from .. import _task\n    import aiopgq._db.statements\n"
    )
    found = set(imports_in(source, "aiopgq._worker"))
    assert found == {"aiopgq._client.queue", "aiopgq._task", "aiopgq._db.statements"}


def code_lines(text: str) -> int:
    """The lines of a module but its docstrings: the reference's text (Args, Returns,
    Raises) does not make a module long to read, its code and comments do."""
    documented: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                documented.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return len(text.splitlines()) - len(documented)


def test_code_lines_leave_out_docstrings() -> None:
    text = '"""Module.\n\nMore."""\n\n\ndef f() -> None:\n    """F."""\n    return None\n'
    assert code_lines(text) == 8 - 3 - 1


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_is_small_and_says_its_role(name: str) -> None:
    path = MODULES[name]
    text = path.read_text(encoding="utf-8")
    if name not in LONGER_ALLOWED:
        lines = code_lines(text)
        assert lines <= MAX_LINES, f"{name} has {lines} lines besides docstrings: split it"
    docstring = ast.get_docstring(ast.parse(text))
    assert docstring and docstring.splitlines()[0].strip(), f"{name} needs a one-line docstring"


def test_public_objects_report_the_public_module() -> None:
    import aiopgq
    import aiopgq.embedded

    for name in aiopgq.__all__:
        obj = getattr(aiopgq, name)
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")):
            assert obj.__module__ == "aiopgq", name
    assert repr(aiopgq.Queue).endswith("'aiopgq.Queue'>")
    assert aiopgq.embedded.EmbeddedServer.__module__ == "aiopgq.embedded"


def test_queue_is_one_class_whose_methods_are_all_in_its_module() -> None:
    import inspect

    import aiopgq

    assert len(aiopgq.Queue.__mro__) <= 3, "Queue is composed of parts, not a stack of mixins"
    for name, member in vars(aiopgq.Queue).items():
        if name.startswith("_") and name not in ("__init__", "__aenter__", "__aexit__"):
            continue
        func = member.fget if isinstance(member, property) else member
        if inspect.isfunction(func):
            assert func.__code__.co_filename == str(PACKAGE / "_client" / "queue.py"), name
