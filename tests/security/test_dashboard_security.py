"""The dashboard as someone who reaches its port sees it: reads behind the token when
it serves beyond this machine, a warning when reads are open, and an action endpoint
that refuses a huge unauthenticated body without reading it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from selenium import webdriver

from aiopgq import JobStatus, Queue
from aiopgq.dashboard import create_app

from ..dashboard.conftest import browser
from ..support.cli import ROOT
from ..support.dashboard import free_port, stop
from ..support.helpers import eventually

__all__ = ["browser"]  # the fixture, imported for the browser test

TOKEN = "read-s3cret-token"
SECRET = "card 4111-1111-1111-1111"


@contextmanager
def dashboard(dsn: str, schema: str, *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`aiopgq dashboard ARGS` on a free port, once it answers HTTP (any status)."""
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
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                out, err = process.communicate()
                pytest.fail(f"aiopgq dashboard exited {process.returncode}: {out}{err}")
            try:
                httpx.get(url + "/", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    pytest.fail("aiopgq dashboard did not answer within 30 s")
                time.sleep(0.1)
        yield url, process
    finally:
        stop(process)


def _get(url: str, **options: Any) -> httpx.Response:
    return httpx.get(url, timeout=30, **options)


def _post(url: str, **options: Any) -> httpx.Response:
    return httpx.post(url, timeout=30, **options)


async def test_beyond_loopback_reads_need_the_token_by_default(dsn: str, queue: Queue) -> None:
    job = await queue.enqueue("billing.charge", {"card": SECRET})
    with dashboard(dsn, queue.schema, "--host", "0.0.0.0", "--token", TOKEN) as (url, process):
        for path in ("/", "/jobs", f"/jobs/{job.id}"):
            for headers in ({}, {"X-Aiopgq-Live": "1"}):
                refused = _get(url + path, headers=headers)
                assert refused.status_code == 401, path
                assert refused.headers["www-authenticate"].startswith("Basic ")
                assert SECRET not in refused.text and "billing" not in refused.text
        wrong = _get(f"{url}/jobs/{job.id}", auth=("any", "not-the-token"))
        assert wrong.status_code == 401 and SECRET not in wrong.text
        # Never a credential: a query string or a cookie.
        assert _get(f"{url}/jobs/{job.id}?token={TOKEN}").status_code == 401
        cookie = _get(f"{url}/jobs/{job.id}", headers={"Cookie": f"token={TOKEN}"})
        assert cookie.status_code == 401
        # The browser's way (HTTP Basic, any user name) and a script's (Bearer).
        page = _get(f"{url}/jobs/{job.id}", auth=("operator", TOKEN))
        assert page.status_code == 200 and SECRET in page.text
        bearer = _get(f"{url}/jobs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200 and "billing.charge" in bearer.text
        # A Basic password is no action credential: a cross-site form would carry it.
        basic_post = _post(f"{url}/api/jobs/{job.id}/cancel", auth=("operator", TOKEN))
        assert basic_post.status_code == 401
        # Static files hold no data.
        assert _get(f"{url}/static/dashboard.js").status_code == 200
        code, out, err = stop(process)
    assert code == 0
    assert "reads need the token too" in out and "warning" not in err, (out, err)
    assert (await queue.get_job(job.id)).status is JobStatus.PENDING


def test_beyond_loopback_without_a_token_it_refuses_to_start(dsn: str, queue: Queue) -> None:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "PYTHONPATH": str(ROOT)}
    env.pop("AIOPGQ_DASHBOARD_TOKEN", None)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "aiopgq", "dashboard", "--schema", queue.schema),
            *("--host", "0.0.0.0", "--port", str(free_port())),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "reads need the token" in done.stderr
    assert "--no-require-token-for-reads" in done.stderr


async def test_open_reads_warn_at_start_naming_the_host(dsn: str, queue: Queue) -> None:
    job = await queue.enqueue("billing.charge", {"card": SECRET})
    args = ("--host", "0.0.0.0", "--no-require-token-for-reads")
    with dashboard(dsn, queue.schema, *args) as (url, process):
        assert SECRET in _get(f"{url}/jobs/{job.id}").text  # open, as asked
        code, _, err = stop(process)
    assert code == 0
    assert err.startswith("warning: reads need no token: anyone who reaches 0.0.0.0:"), err
    assert "--require-token-for-reads" in err


async def test_reads_on_loopback_can_need_the_token(dsn: str, queue: Queue) -> None:
    job = await queue.enqueue("billing.charge", {"card": SECRET})
    args = ("--require-token-for-reads", "--token", TOKEN)
    with dashboard(dsn, queue.schema, *args) as (url, process):
        assert _get(f"{url}/jobs/{job.id}").status_code == 401
        assert SECRET in _get(f"{url}/jobs/{job.id}", auth=("u", TOKEN)).text
        code, _, err = stop(process)
    assert code == 0 and err == ""


async def test_create_app_reads_need_the_token_when_asked(queue: Queue) -> None:
    job = await queue.enqueue("billing.charge", {"card": SECRET})
    with pytest.raises(ValueError, match="require_token_for_reads=True needs a token"):
        create_app(queue, require_token_for_reads=True)
    guarded = create_app(queue, token=TOKEN, require_token_for_reads=True)
    transport = httpx.ASGITransport(app=guarded)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        refused = await http.get(f"/jobs/{job.id}")
        assert refused.status_code == 401 and SECRET not in refused.text
        assert refused.headers["content-security-policy"].startswith("default-src 'self'")
        assert refused.headers["x-frame-options"] == "DENY"
        assert SECRET in (await http.get(f"/jobs/{job.id}", auth=("u", TOKEN))).text


async def test_a_browser_reads_with_the_token_and_the_page_stays_live(
    dsn: str, queue: Queue, browser: webdriver.Chrome
) -> None:
    await queue.enqueue("billing.charge", {"card": SECRET})
    with dashboard(dsn, queue.schema, "--host", "0.0.0.0", "--token", TOKEN) as (url, _):
        # What the browser sends once its password prompt is answered: Basic credentials
        # for the origin, sent again with the page's own polling requests.
        browser.get(url.replace("http://", f"http://operator:{TOKEN}@") + "/jobs")
        # Chromium answers the 401 with the URL's credentials in a second request, and
        # get() can return before that page is shown (page_source "" under load): wait.
        await eventually(lambda: "billing.charge" in browser.page_source, within=30)
        later = await queue.enqueue("billing.refund", {"card": SECRET})

        def shown() -> bool:
            state = browser.execute_script("return document.getElementById('live-state').className")
            return state == "live" and f"/jobs/{later.id}" in browser.page_source

        await eventually(shown, within=30)


def _raw_post(url: str, head: str, body: bytes) -> bytes:
    """Send a request's head and the start of its body; what the server answers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n" + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        ("", b"413"),
        ("Authorization: Bearer wrong\r\n", b"401"),
        (f"Authorization: Bearer {TOKEN}\r\n", b"413"),
    ],
)
async def test_a_huge_post_is_refused_before_its_body_is_read(
    dsn: str, queue: Queue, authorization: str, status: bytes
) -> None:
    job = await queue.enqueue("billing.charge", {"card": SECRET})
    with dashboard(dsn, queue.schema, "--token", TOKEN) as (url, _):
        # 400 MB announced, 1 KB sent: the answer comes without the rest.
        head = (
            f"POST /api/jobs/{job.id}/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n{authorization}"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {400 * 1024 * 1024}\r\n"
        )
        answer = _raw_post(url, head, b"x" * 1024)
        assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
        # Streamed without a length: cut at the cap.
        chunked = (
            f"POST /api/jobs/{job.id}/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n{authorization}"
            "Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n"
        )
        chunk = b"2000\r\n" + b"x" * 0x2000 + b"\r\n"
        answer = _raw_post(url, chunked, chunk * 2)
        assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert (await queue.get_job(job.id)).status is JobStatus.PENDING
