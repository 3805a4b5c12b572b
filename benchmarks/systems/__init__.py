"""The compared systems, imported lazily so a missing peer only fails its own runs."""

from __future__ import annotations

import importlib
from pathlib import Path

from benchmarks.systems.base import System, WorkerConfig, WorkerRunner

_MODULES = {
    "aiopgq": ("benchmarks.systems.aiopgq_system", "AiopgqSystem"),
    "aiopgq-base": ("benchmarks.systems.aiopgq_system", "AiopgqBaseSystem"),
    "bare": ("benchmarks.systems.bare", "BareSystem"),
    "bare-leased": ("benchmarks.systems.bare", "LeasedBareSystem"),
    "pgqueuer": ("benchmarks.systems.pgqueuer_system", "PgQueuerSystem"),
    "procrastinate": ("benchmarks.systems.procrastinate_system", "ProcrastinateSystem"),
}


def load_system(name: str, dsn: str, baseline: Path | None = None) -> System:
    """The system `name`; `aiopgq-base` in the parent also needs the `--baseline` tree."""
    module_name, class_name = _MODULES[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    system: System = cls(dsn, baseline) if baseline is not None else cls(dsn)
    return system


__all__ = ["System", "WorkerConfig", "WorkerRunner", "load_system"]
