"""Fixtures for the dashboard: `aiopgq dashboard` as a process, and a headless Chromium.

The browser is Debian's chromium driven by its chromium-driver through Selenium;
tests/support/system.py installs both as root, or the tests skip (fail under CI) naming them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from aiopgq import Queue

from ..support import system
from ..support.dashboard import TOKEN, Dashboard, start_dashboard, stop


def _find(*names: str) -> str:
    system.require("chromium")
    found = system.find(*names)
    assert found is not None
    return found


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


@pytest.fixture
def dashboard(dsn: str, queue: Queue) -> Iterator[Dashboard]:
    """The dashboard of the test's schema, with actions allowed by TOKEN."""
    running = start_dashboard(dsn, queue.schema, "--token", TOKEN)
    try:
        yield running
    finally:
        stop(running.process)
