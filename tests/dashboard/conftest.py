"""Fixtures for the dashboard: `aiopgq dashboard` as a process, and a headless Chromium.

The browser is Debian's chromium driven by its chromium-driver through Selenium; .ci/run
installs both. When they are missing the tests fail (never skip) and say how to install.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from aiopgq import Queue

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-test-token"


def _find(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/lib/chromium")
        if found:
            return found
    pytest.fail(
        f"the dashboard's browser tests need {' or '.join(names)}: "
        "apt-get update && apt-get install -y chromium chromium-driver (as .ci/run does)",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = _find("chromium", "chromium-browser")
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    service = Service(_find("chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


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


@pytest.fixture
def dashboard(dsn: str, queue: Queue) -> Iterator[Dashboard]:
    """The dashboard of the test's schema, with actions allowed by TOKEN."""
    running = start_dashboard(dsn, queue.schema, "--token", TOKEN)
    try:
        yield running
    finally:
        stop(running.process)
