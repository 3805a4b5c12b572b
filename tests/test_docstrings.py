"""Every public class, function, method and property has a docstring: the reference shows it."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

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
