"""`python -m aiopgq ...` as a child process of the tests, on this checkout and schema."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli(dsn: str, schema: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_TEST_SCHEMA": schema, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "aiopgq", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_cli(dsn: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = cli(dsn, schema, *args)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
