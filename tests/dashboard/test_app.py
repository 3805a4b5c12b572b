"""The dashboard app over HTTP, in process: who may act, what bad requests get, mounting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from aiopgq import JobContext, JobStatus, Queue
from aiopgq.dashboard import create_app

from ..support.dashboard import start_dashboard, stop

TOKEN = "t0ken"


@asynccontextmanager
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        yield http


async def test_actions_need_the_token_in_a_header_or_form_field(queue: Queue) -> None:
    jobs = [await queue.enqueue("t", {"i": i}) for i in range(3)]
    async with client(create_app(queue, token=TOKEN)) as http:
        url = f"/api/jobs/{jobs[0].id}/cancel"
        refused = await http.post(url)
        assert refused.status_code == 401
        assert refused.json() == {
            "ok": False,
            "message": "this action needs the dashboard token: enter it at the top right",
        }
        assert (await http.post(url, headers={"Authorization": "Bearer nope"})).status_code == 401
        assert (await http.post(url, data={"token": "nope"})).status_code == 401
        # A cookie is never a credential: a cross-site form would send it.
        assert (await http.post(url, headers={"Cookie": f"token={TOKEN}"})).status_code == 401
        assert (await http.get(url)).status_code == 405
        assert (await queue.get_job(jobs[0].id)).status is JobStatus.PENDING

        by_header = await http.post(url, headers={"Authorization": f"Bearer {TOKEN}"})
        assert by_header.json() == {"ok": True, "message": f"job {jobs[0].id} cancelled"}
        by_form = await http.post(f"/api/jobs/{jobs[1].id}/cancel", data={"token": TOKEN})
        assert by_form.json()["ok"] is True
        again = await http.post(url, data={"token": TOKEN})
        assert again.json() == {
            "ok": False,
            "message": f"job {jobs[0].id} is cancelled already: nothing to cancel",
        }
        missing = await http.post("/api/jobs/999999/retry", data={"token": TOKEN})
        assert missing.status_code == 404 and "no job with id 999999" in missing.json()["message"]
        no_queue = await http.post("/api/queues/pause", data={"token": TOKEN})
        assert (no_queue.status_code, no_queue.json()["message"]) == (
            400,
            "name the queue: a form field `queue`",
        )
        paused = await http.post("/api/queues/pause", data={"token": TOKEN, "queue": "a/b c"})
        assert paused.json()["ok"] and await queue.paused_queues() == ["a/b c"]
    assert [(await queue.get_job(j.id)).status for j in jobs] == [
        JobStatus.CANCELLED,
        JobStatus.CANCELLED,
        JobStatus.PENDING,
    ]


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_a_read_only_dashboard_refuses_every_action(queue: Queue, token: str | None) -> None:
    job = await queue.enqueue("t")
    async with client(create_app(queue, token=token, read_only=token is not None)) as http:
        page = await http.get(f"/jobs/{job.id}")
        assert page.status_code == 200 and "read-only" in page.text
        assert "<button" not in page.text and 'id="token"' not in page.text
        refused = await http.post(f"/api/jobs/{job.id}/cancel", data={"token": TOKEN})
        assert refused.status_code == 403
        assert refused.json()["message"].startswith("this dashboard is read-only")
        if token is None:
            assert "AIOPGQ_DASHBOARD_TOKEN" in refused.json()["message"]
    assert (await queue.get_job(job.id)).status is JobStatus.PENDING


async def test_pages_send_security_headers_and_load_nothing_from_elsewhere(queue: Queue) -> None:
    async with client(create_app(queue, token=TOKEN)) as http:
        page = await http.get("/")
        assert page.headers["x-frame-options"] == "DENY"
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert "http://" not in page.text and "https://" not in page.text
        assert "<script>" not in page.text  # the CSP allows no inline script
        script = await http.get("/static/dashboard.js")
        assert script.status_code == 200 and "Authorization" in script.text


async def test_bad_requests_get_a_page_that_says_what_is_wrong(queue: Queue) -> None:
    async with client(create_app(queue)) as http:
        bad_status = await http.get("/jobs?status=lost")
        assert bad_status.status_code == 400
        assert "status must be one of pending, running, done, failed, cancelled" in bad_status.text
        bad_before = await http.get("/jobs?before=x")
        assert bad_before.status_code == 400 and "before must be a job id" in bad_before.text
        missing = await http.get("/jobs/424242")
        assert missing.status_code == 404 and "no job with id 424242" in missing.text
        nowhere = await http.get("/nowhere")
        assert nowhere.status_code == 404 and "/nowhere" in nowhere.text
        live = await http.get("/jobs?status=lost", headers={"X-Aiopgq-Live": "1"})
        assert live.text.startswith('<p class="problem">')  # the live region only


async def test_jobs_are_listed_newest_first_a_page_at_a_time(queue: Queue) -> None:
    jobs = await queue.enqueue_many("page.me", [{"i": i} for i in range(60)], queue="pages")
    async with client(create_app(queue)) as http:
        first = await http.get("/jobs", params={"queue": "pages", "task": "page.me"})
        shown = first.text.count('<tr data-job="')
        assert shown == 50 and f'data-job="{jobs[-1].id}"' in first.text
        older = f"/jobs?queue=pages&amp;task=page.me&amp;before={jobs[10].id}"
        assert older in first.text
        second = await http.get(older.replace("&amp;", "&"))
        assert second.text.count('<tr data-job="') == 10
        assert "← newest" in second.text and "older →" not in second.text


async def test_it_mounts_in_a_host_app_and_opens_a_closed_queue(dsn: str, queue: Queue) -> None:
    job = await queue.enqueue("mounted.job", {"x": 1}, queue="mounted")
    closed = Queue(dsn, schema=queue.schema)  # never opened: the app opens it
    host = Starlette(routes=[Mount("/ops/queue", create_app(closed, token=TOKEN))])
    try:
        async with client(host) as http:
            page = await http.get("/ops/queue/")
            assert page.status_code == 200
            assert 'href="/ops/queue/static/dashboard.css"' in page.text
            assert 'href="/ops/queue/jobs?queue=mounted"' in page.text
            assert (await http.get("/ops/queue/static/dashboard.css")).status_code == 200
            detail = await http.get(f"/ops/queue/jobs/{job.id}")
            assert "mounted.job" in detail.text
            retried = await http.post(
                f"/ops/queue/api/jobs/{job.id}/cancel", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert retried.json()["ok"] is True
        assert closed.is_open
    finally:
        await closed.close()


async def test_create_app_rejects_bad_arguments(queue: Queue) -> None:
    with pytest.raises(TypeError, match=r"create_app needs an aiopgq\.Queue"):
        create_app("postgresql://x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token must be a non-empty string"):
        create_app(queue, token=" ")
    with pytest.raises(ValueError, match="poll_interval must be seconds > 0"):
        create_app(queue, poll_interval=0)
    with pytest.raises(TypeError, match="window must be seconds"):
        create_app(queue, window="60")  # type: ignore[arg-type]


async def test_the_command_answers_only_its_own_host_and_stops_cleanly(
    dsn: str, queue: Queue
) -> None:
    running = start_dashboard(dsn, queue.schema, "--token", TOKEN)
    try:
        async with httpx.AsyncClient() as http:
            page = await http.get(running.url + "/")
            assert page.status_code == 200
            # A name re-pointed at 127.0.0.1 by another site (DNS rebinding) is refused.
            rebound = await http.get(running.url + "/", headers={"Host": "evil.example:80"})
            assert rebound.status_code == 400
            local = await http.get(running.url + "/", headers={"Host": "localhost:1"})
            assert local.status_code == 200
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(15) == 0
    finally:
        _, out, err = stop(running.process)
    assert out.startswith(f"aiopgq dashboard for schema {queue.schema}: http://127.0.0.1:")
    assert "(actions need the token)" in out
    assert err == (
        "warning: reads need no token: every user of this machine can read every job's "
        "payload and result; pass --require-token-for-reads (with a token) to close them\n"
    )


def test_the_command_on_a_schema_without_tables_says_to_migrate(dsn: str, schema: str) -> None:
    env = {**os.environ, "AIOPGQ_DSN": dsn}
    done = subprocess.run(
        [sys.executable, "-m", "aiopgq", "dashboard", "--schema", schema, "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "aiopgq migrate" in done.stderr and "Traceback" not in done.stderr


async def test_the_job_page_shows_durable_steps_and_what_the_job_waits_for(
    queue: Queue,
) -> None:
    @queue.task(name="d.order")
    async def order(ctx: JobContext) -> None:
        await ctx.step("reserve <stock>", lambda: 1)  # escaped like any user text
        await ctx.wait_event("payment:42")

    job = await order.enqueue()
    plain = await queue.enqueue("d.plain", {})
    await queue.worker(queues=["default"]).run(burst=True)
    async with client(create_app(queue)) as http:
        page = (await http.get(f"/jobs/{job.id}")).text
        assert 'id="steps"' in page and "Waits for:" in page
        assert "event payment:42" in page and "reserve &lt;stock&gt;" in page
        assert "reserve <stock>" not in page
        assert 'id="steps"' not in (await http.get(f"/jobs/{plain.id}")).text
