"""`aiopgq dashboard` as a child process of the tests, on a free port, once it answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx
import pytest

from .cli import ROOT

TOKEN = "s3cret-test-token"


@dataclass
class Dashboard:
    url: str
    process: subprocess.Popen[str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_dashboard(dsn: str, schema: str, *args: str) -> Dashboard:
    """`aiopgq dashboard` on a free port, once it answers."""
    port = free_port()
    env = {**os.environ, "AIOPGQ_DSN": dsn, "PYTHONPATH": str(ROOT)}
    env.pop("AIOPGQ_DASHBOARD_TOKEN", None)
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "aiopgq", "dashboard", "--schema", schema),
            *("--port", str(port), "--poll-interval", "0.3", *args),
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"aiopgq dashboard exited {process.returncode}: {out}{err}")
        try:
            if httpx.get(url + "/", timeout=2).status_code == 200:
                return Dashboard(url, process)
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            stop(process)
            pytest.fail("aiopgq dashboard did not answer within 30 s")
        time.sleep(0.1)


def stop(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return process.returncode, out, err
