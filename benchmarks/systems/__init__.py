"""The compared systems, imported lazily so a missing peer only fails its own runs."""

from __future__ import annotations

import importlib

from benchmarks.systems.base import System, WorkerConfig, WorkerRunner

_MODULES = {
    "aiopgq": ("benchmarks.systems.aiopgq_system", "AiopgqSystem"),
    "bare": ("benchmarks.systems.bare", "BareSystem"),
    "pgqueuer": ("benchmarks.systems.pgqueuer_system", "PgQueuerSystem"),
    "procrastinate": ("benchmarks.systems.procrastinate_system", "ProcrastinateSystem"),
}


def load_system(name: str, dsn: str) -> System:
    module_name, class_name = _MODULES[name]
    cls: type[System] = getattr(importlib.import_module(module_name), class_name)
    return cls(dsn)


__all__ = ["System", "WorkerConfig", "WorkerRunner", "load_system"]
