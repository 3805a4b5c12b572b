"""A user's project in a folder, tested by a pytest of its own (a subprocess) on this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .markdown import ROOT


def run_pytest(project: Path, env_dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AIOPGQ_DSN", "DATABASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    if env_dsn is not None:
        env["AIOPGQ_DSN"] = env_dsn
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_project(project: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (project / name).write_text(text, encoding="utf-8")
