"""The README's quick start and FastAPI example, pasted in order the way a newcomer pastes them."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import re
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from aiopgq._embedded.running import DEFAULT_PORT, dsn_for, export_line

from ..support.markdown import README, blocks
from ..support.newcomer import SERVER_DSN, Newcomer, fetchval, free_port, wait_for


def test_the_readme_dsn_is_the_one_aiopgq_server_prints_by_default() -> None:
    default = Path.home() / ".local" / "share" / "aiopgq" / "pg18"
    line = export_line(dsn_for(default, DEFAULT_PORT))
    assert line == f'export AIOPGQ_DSN="{SERVER_DSN}"'
    assert f"`{line}`" in README.read_text(encoding="utf-8")


def test_quick_start_runs_as_pasted(newcomer: Newcomer) -> None:
    quick = blocks("quickstart")
    assert [b.language for b in quick] == ["python", "bash", "bash"]
    for block in quick:
        newcomer.paste(block)

    first_job = newcomer.output("python app.py")
    assert "task='demo.add'" in first_job
    assert "status=<JobStatus.DONE: 'done'>" in first_job and "result=3," in first_job
    assert newcomer.output("aiopgq migrate").strip() == "schema aiopgq is up to date"
    ids = newcomer.output("aiopgq enqueue").split() + newcomer.output("echo").split()
    assert len(ids) == 2 and all(i.isdigit() for i in ids)
    assert "pending" in newcomer.output("aiopgq status")

    # the CLI worker runs what app.py left (the delayed job) and the CLI's jobs
    jobs = "SELECT count(*) FILTER (WHERE status = 'done') || '/' || count(*) FROM aiopgq.jobs"
    wait_for(lambda: fetchval(newcomer.dsn, jobs) == "1005/1005", 30, "all done", newcomer)
    log = newcomer.press_ctrl_c()["aiopgq worker app:queue --concurrency 50"]
    assert "started on queues default" in log and "stopped" in log
    results = "SELECT array_agg(result::int ORDER BY id) FROM aiopgq.jobs WHERE id = ANY($1)"
    assert fetchval_args(newcomer.dsn, results, [int(i) for i in ids]) == [3, 5]


def fetchval_args(dsn: str, sql: str, *args: Any) -> Any:
    async def go() -> Any:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


async def test_fastapi_example_enqueues_and_its_embedded_worker_runs(
    newcomer: Newcomer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for block in blocks("fastapi"):
        newcomer.paste(block, background=False)  # migrate; the app runs in-process below
    assert "applied migrations" in newcomer.output("aiopgq migrate")
    monkeypatch.setenv("AIOPGQ_DSN", newcomer.dsn)
    aiopgq_level = logging.getLogger("aiopgq").level
    spec = importlib.util.spec_from_file_location("readme_service", newcomer.folder / "service.py")
    assert spec is not None and spec.loader is not None
    service = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(service)
        app = service.app
        transport = httpx.ASGITransport(app=app)
        # The lifespan as FastAPI runs it at startup and shutdown: the pool and the worker.
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://service") as client,
        ):
            created = await client.post("/signups", params={"email": "ada@example.com"})
            assert created.status_code == 200, created.text
            job_id = created.json()["job_id"]
            deadline = time.monotonic() + 20
            while (status := (await client.get(f"/jobs/{job_id}")).json())["status"] != "done":
                assert time.monotonic() < deadline, (
                    f"the lifespan's worker did not run it: {status}"
                )
                await asyncio.sleep(0.05)
            assert status == {"status": "done", "result": "welcomed ada@example.com", "error": None}
            assert (await client.get("/jobs/999999999")).status_code == 404
            assert service.queue.is_open
        assert not service.queue.is_open  # the lifespan closed what it opened
    finally:
        logging.getLogger("aiopgq").setLevel(aiopgq_level)


def test_fastapi_example_under_uvicorn_shows_aiopgq_logs(newcomer: Newcomer) -> None:
    port = free_port()
    for block in blocks("fastapi"):
        # as written, but on a free port: 8000 may be taken on a shared machine
        newcomer.paste(block, extra=f" --port {port}")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{base}/jobs/1", timeout=1).status_code == 404
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "uvicorn serving the example", newcomer)
    job_id = httpx.post(f"{base}/signups", params={"email": "bo@example.com"}).json()["job_id"]
    wait_for(lambda: httpx.get(f"{base}/jobs/{job_id}").json()["status"] == "done", 20, "job")
    log = newcomer.press_ctrl_c()[f"uvicorn service:app --port {port}"]
    # aiopgq's INFO lines next to uvicorn's own, as the Logging section says
    assert re.search(r" INFO aiopgq\.worker: worker \S+ started on queues emails", log), log
    assert re.search(r" INFO aiopgq\.worker: worker \S+ stopped", log), log
    assert "Application startup complete" in log
