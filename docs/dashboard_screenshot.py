"""Take docs/dashboard.png: a demo schema with busy queues, served and photographed.

    AIOPGQ_DSN=postgresql://... python docs/dashboard_screenshot.py

Needs the `dashboard` extra, Selenium, and Debian's chromium and chromium-driver.
The schema `dashboard_demo` is dropped and made again.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from aiopgq import Queue, Retry

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "dashboard_demo"
OUT = ROOT / "docs" / "dashboard.png"


async def seed(dsn: str) -> Queue:
    conn = await asyncpg.connect(dsn)
    await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    await conn.close()
    queue = Queue(dsn, schema=SCHEMA)
    await queue.migrate()
    await queue.open()
    rng = random.Random(7)

    @queue.task(name="mail.send", queue="emails", max_attempts=3, retry=Retry(base=0, jitter=0))
    async def send(to: str, template: str) -> None:
        await asyncio.sleep(rng.uniform(0.01, 0.05))
        if to.startswith("bounce"):
            raise ConnectionError(f"550 mailbox unavailable: {to}")

    @queue.task(name="reports.build", queue="reports", max_attempts=1)
    async def build(month: str, customer: int) -> None:
        await asyncio.sleep(60 if customer % 4 == 0 else 0.05)

    @queue.task(name="webhooks.deliver", queue="webhooks", max_attempts=2, retry=Retry(base=0))
    async def deliver(url: str) -> None:
        if "timeout" in url:
            raise TimeoutError(f"POST {url} timed out after 10 s")

    for i in range(240):
        to = f"bounce{i}@example.org" if i % 60 == 0 else f"user{i}@example.com"
        await send.enqueue(to, template="welcome")
    for customer in range(1, 13):
        await build.enqueue("2026-11", customer=customer)
    for i in range(90):
        url = f"https://hooks.example.net/{'timeout' if i % 45 == 0 else 'ok'}/{i}"
        await deliver.enqueue(url)
    await queue.enqueue_many("billing.charge", [{"invoice": 1000 + i} for i in range(37)],
                             queue="billing")  # fmt: skip
    await queue.enqueue_many("mail.send", [{"to": "later@example.com", "template": "digest"}] * 25,
                             queue="emails", delay=3600)  # fmt: skip
    await queue.pause("billing")
    return queue


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def photograph(dsn: str) -> None:
    """Serve the demo schema with `aiopgq dashboard` and save a screenshot of it."""
    port = free_port()
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_DASHBOARD_TOKEN": "demo"}
    server = subprocess.Popen(
        [sys.executable, "-m", "aiopgq", "dashboard", "--schema", SCHEMA, "--port", str(port)],
        env=env,
    )
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ("--headless=new", "--no-sandbox", "--window-size=1200,720",
                         "--hide-scrollbars", "--force-device-scale-factor=1"):  # fmt: skip
            options.add_argument(argument)
        browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            browser.get(f"http://127.0.0.1:{port}/")
            browser.execute_script("sessionStorage.setItem('aiopgq-dashboard-token', 'demo')")
            browser.refresh()
            time.sleep(2.5)  # one live refresh
            browser.save_screenshot(str(OUT))
        finally:
            browser.quit()
    finally:
        server.terminate()
        server.wait(10)


async def main() -> None:
    dsn = os.environ.get("AIOPGQ_DSN") or os.environ["DATABASE_URL"]
    queue = await seed(dsn)
    worker = queue.worker(queues=["emails", "reports", "webhooks"], concurrency=20)
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(4)  # the worker drains most of it; a few reports keep running
    # More arrivals, so that the rates show traffic in and out.
    await queue.enqueue_many(
        "mail.send", [{"to": f"late{i}@example.com", "template": "receipt"} for i in range(130)]
    )
    try:
        await asyncio.to_thread(photograph, dsn)  # the worker runs on meanwhile
    finally:
        worker.stop()
        await running
        await queue.close()
    from PIL import Image  # matplotlib's dependency: a palette PNG is a third the size

    image = Image.open(OUT).convert("RGB")
    image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(OUT, optimize=True)
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    asyncio.run(main())
