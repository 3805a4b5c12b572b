"""Every public class, function, method and property has a docstring: the reference shows it.

And the docstrings say what the reference needs (Google style, as mkdocs.yml configures
mkdocstrings): every parameter of a public callable is named in its `Args:` section (a
dataclass's fields in `Attributes:`), a callable that returns something has `Returns:` (or
`Yields:`), and one whose own body raises an exception class by name has `Raises:` naming
that class or a base of it.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiopgq import ConfigurationError

PUBLIC_MODULES = ["aiopgq", "aiopgq.embedded", "aiopgq.testing", "aiopgq.metrics", "aiopgq.tracing"]


def public_objects(module_name: str) -> Iterator[tuple[str, Any]]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name)
        # classes and functions of aiopgq's own (not re-exported imports, not type aliases)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__.startswith(
            "aiopgq"
        ):
            yield f"{module_name}.{name}", obj


def undocumented(module_name: str) -> list[str]:
    missing = []
    for name, obj in public_objects(module_name):
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for attribute, value in vars(obj).items():
            if attribute.startswith("_"):
                continue
            if not (
                inspect.isfunction(value)
                or isinstance(value, (property, classmethod, staticmethod))
            ):
                continue
            # getdoc follows the base classes: an Observer hook's override keeps its contract
            if not (inspect.getdoc(getattr(obj, attribute)) or "").strip():
                missing.append(f"{name}.{attribute}")
    return missing


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_object_has_a_docstring(module_name: str) -> None:
    assert list(public_objects(module_name)), module_name
    assert undocumented(module_name) == []


def test_the_reference_shows_every_public_name() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md").read_text()
    shown = set(re.findall(r"^::: ([\w.]+)$", page, re.MULTILINE))
    public = {name for name, _ in public_objects("aiopgq")} | set(PUBLIC_MODULES[1:])
    assert public - shown == set()


# -- what the docstrings say ---------------------------------------------------------------

# Google-style section titles, as mkdocstrings' parser (griffe) reads them.
_TITLES = {
    "args": "Args",
    "arguments": "Args",
    "params": "Args",
    "parameters": "Args",
    "attributes": "Attributes",
    "raises": "Raises",
    "exceptions": "Raises",
    "returns": "Returns",
    "yields": "Yields",
}
_TITLE = re.compile(r"^(\s*)(\w+(?: \w+)?):\s*$")
_ITEM = re.compile(r"^(\*{0,2}[\w.]+)\s*(?:\([^)]*\))?\s*:")


def sections(doc: str) -> dict[str, list[str]]:
    """The Google-style sections of `doc`: title -> the names its items start with
    (`name:` or `name (type):`; the first line of each item of Returns and Yields)."""
    found: dict[str, list[str]] = {}
    lines = doc.expandtabs().splitlines()
    number = 0
    while number < len(lines):
        title = _TITLE.match(lines[number])
        blank_before = number == 0 or not lines[number - 1].strip()
        if not (title and blank_before and title.group(2).lower() in _TITLES):
            number += 1
            continue
        kind, indent = _TITLES[title.group(2).lower()], len(title.group(1))
        items = found.setdefault(kind, [])
        item_indent = None
        number += 1
        while number < len(lines):
            line = lines[number]
            if line.strip():
                depth = len(line) - len(line.lstrip())
                if depth <= indent:
                    break
                item_indent = depth if item_indent is None else item_indent
                if depth == item_indent:
                    item = _ITEM.match(line.strip())
                    if kind in ("Returns", "Yields"):
                        items.append(line.strip())
                    elif item:  # a dotted exception name counts by its last part
                        items.append(item.group(1).rpartition(".")[2])
            number += 1
    return found


def _named(name: str, items: list[str]) -> bool:
    return name in items or name.lstrip("*") in (item.lstrip("*") for item in items)


def _directly_raised(functions: list[Callable[..., Any]]) -> set[type[BaseException]]:
    """The exception classes these functions' own bodies raise by name (not those of
    what they call, not a re-raise of a caught or built exception)."""
    raised: set[type[BaseException]] = set()
    for fn in functions:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        definition = tree.body[0]
        for node in ast.walk(definition):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if not isinstance(target, ast.Name):
                continue
            value = fn.__globals__.get(target.id, getattr(builtins, target.id, None))
            if inspect.isclass(value) and issubclass(value, BaseException):
                raised.add(value)
    return raised


def _own_functions(obj: Any) -> list[Callable[..., Any]]:
    """The functions whose source is `obj`'s behaviour: a function itself; a class's
    __init__ and __post_init__ when aiopgq defines them."""
    if not inspect.isclass(obj):
        return [inspect.unwrap(obj)]
    found = []
    for name in ("__init__", "__post_init__"):
        fn = vars(obj).get(name)
        if inspect.isfunction(fn) and fn.__module__.startswith("aiopgq"):
            try:
                inspect.getsource(fn)
            except (OSError, TypeError):  # made by @dataclass: no source of its own
                continue
            found.append(fn)
    return found


def _parameters(obj: Any) -> list[inspect.Parameter]:
    """The parameters a caller passes (not self or cls): a class's are its __init__'s."""
    if inspect.isclass(obj):
        init = obj.__init__
        if not (inspect.isfunction(init) and init.__module__.startswith("aiopgq")):
            return []  # Exception's or object's: nothing of aiopgq's to document
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _returns_something(fn: Callable[..., Any]) -> bool:
    annotation = inspect.signature(fn).return_annotation
    return annotation not in (inspect.Signature.empty, None, "None")


def docstring_problems(name: str, obj: Any) -> list[str]:
    """What the docstring of the public callable `obj` (a function, method or class)
    leaves out, as "name: problem" lines."""
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj) and "__init__" in vars(obj):
        doc += "\n\n" + (inspect.getdoc(vars(obj)["__init__"]) or "")
    found = sections(doc)
    documented = found.get("Args", []) + (
        found.get("Attributes", []) if inspect.isclass(obj) else []
    )
    problems = []
    for parameter in _parameters(obj):
        shown = {
            inspect.Parameter.VAR_POSITIONAL: f"*{parameter.name}",
            inspect.Parameter.VAR_KEYWORD: f"**{parameter.name}",
        }.get(parameter.kind, parameter.name)
        if not _named(shown, documented):
            problems.append(f"{name}: parameter {shown} is not in its Args section")
    if not inspect.isclass(obj) and _returns_something(obj):
        if not (found.get("Returns") or found.get("Yields")):
            problems.append(f"{name}: returns a value, but has no Returns section")
    for kind in ("Returns", "Yields"):
        # griffe reads each line at the item indent as one more item (one per element of
        # a tuple): a description's next lines go deeper
        if len(found.get(kind, [])) > 1:
            problems.append(f"{name}: its {kind} section has {len(found[kind])} items, not 1")
    raises = found.get("Raises", [])
    for error in sorted(_directly_raised(_own_functions(obj)), key=lambda e: e.__name__):
        if not any(base.__name__ in raises for base in error.__mro__):
            problems.append(f"{name}: raises {error.__name__}, not in its Raises section")
    return problems


def reference_callables(module_name: str) -> Iterator[tuple[str, Any]]:
    """The callables the reference shows of a public module: its public classes and
    functions, each class's public methods, and the module's own public functions (a
    plugin's hooks and fixtures)."""
    module = importlib.import_module(module_name)
    seen = dict(public_objects(module_name))
    for name, value in vars(module).items():
        if name.startswith("_") or f"{module_name}.{name}" in seen:
            continue
        fn = getattr(value, "__wrapped__", value)  # a pytest fixture wraps its function
        if inspect.isfunction(fn) and fn.__module__ == module_name:
            seen[f"{module_name}.{name}"] = value
    for name, obj in seen.items():
        fixture = getattr(obj, "_get_wrapped_function", None)
        yield name, fixture() if callable(fixture) else obj
        if not inspect.isclass(obj):
            continue
        for attribute, value in vars(obj).items():
            if attribute.startswith("_"):
                continue
            if isinstance(value, (classmethod, staticmethod)):
                yield f"{name}.{attribute}", value.__func__
            elif inspect.isfunction(value) and (inspect.getdoc(value) or "").strip():
                yield f"{name}.{attribute}", value


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_callable_documents_its_arguments_returns_and_raises(
    module_name: str,
) -> None:
    callables = list(reference_callables(module_name))
    assert callables, module_name
    problems = [p for name, obj in callables for p in docstring_problems(name, obj)]
    assert problems == []


def _example(fn: Callable[..., Any]) -> list[str]:
    return docstring_problems(fn.__name__, fn)


def test_the_check_sees_a_missing_argument_return_or_raise() -> None:
    def undocumented(seconds: float, *names: str, **options: Any) -> int:
        """Sleep.

        Args:
            seconds: how long, in seconds.
        """
        raise ConfigurationError("no")

    def documented(seconds: float, *names: str, **options: Any) -> int:
        """Sleep.

        Args:
            seconds: how long, in seconds.
            *names: what to sleep on.
            **options: how.

        Returns:
            The time slept.

        Raises:
            aiopgq.Error: always (a ConfigurationError: the check accepts a base).
        """
        raise ConfigurationError("no")

    assert _example(undocumented) == [
        "undocumented: parameter *names is not in its Args section",
        "undocumented: parameter **options is not in its Args section",
        "undocumented: returns a value, but has no Returns section",
        "undocumented: raises ConfigurationError, not in its Raises section",
    ]
    assert _example(documented) == []

    def two_returns() -> int:
        """Count.

        Returns:
            The count, a line
            too many at the item indent.
        """
        return 1

    assert _example(two_returns) == ["two_returns: its Returns section has 2 items, not 1"]


def test_sections_reads_google_style() -> None:
    doc = inspect.cleandoc(
        """Do it.

        >>> do(1)

        Args:
            first: one line.
            second (int): two lines
                of text: with a colon.
            **options: the rest.

        Returns:
            What it did: a count.

        Raises:
            ValueError: when `first` is bad.
        """
    )
    assert sections(doc) == {
        "Args": ["first", "second", "**options"],
        "Returns": ["What it did: a count."],
        "Raises": ["ValueError"],
    }
