"""The dashboard's workflow pages: the list, and one workflow drawn as a graph whose
statuses follow the jobs live (in a real headless Chromium), groups drawn as one box."""

from __future__ import annotations

import httpx
from selenium import webdriver

from aiopgq import Queue
from aiopgq.dashboard import create_app

from ..support.dashboard import Dashboard
from ..support.helpers import eventually
from .test_browser import attribute, count, text


async def nightly(queue: Queue) -> int:
    """extract -> a group of 3 transforms -> load: a workflow of 5 jobs, 3 boxes."""

    @queue.task(name="etl.extract")
    async def extract() -> int:
        return 3

    @queue.task(name="etl.transform")
    async def transform(part: int) -> int:
        return part * 10

    @queue.task(name="etl.load")
    async def load() -> str:
        return "loaded"

    wf = queue.workflow("nightly")
    first = wf.add(extract)
    parts = wf.add_many(transform, [{"part": n} for n in range(3)], depends_on=[first])
    wf.add(load, depends_on=[parts])
    return await wf.enqueue()


async def test_a_workflow_graph_follows_its_jobs_live(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    wid = await nightly(queue)
    browser.get(f"{dashboard.url}/workflows")
    assert attribute(browser, f'tr[data-workflow="{wid}"]', "data-status") == "running"
    assert "nightly" in text(browser, f'tr[data-workflow="{wid}"]')

    browser.get(f"{dashboard.url}/workflows/{wid}")
    assert browser.title == f"Workflow {wid} · aiopgq {queue.schema}"
    assert count(browser, "svg g.node") == 3  # the group of 3 is one box
    assert count(browser, "svg path.edge") == 2
    statuses = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg g.node'), n => n.dataset.status);"
    )
    assert statuses == ["pending", "waiting", "waiting"]
    assert "0/3 done" in text(browser, 'svg g.node[data-status="waiting"] text.detail')

    # A worker runs the whole graph: the page shows each box done without a reload.
    await queue.worker().run(burst=True)
    await eventually(lambda: count(browser, 'svg g.node[data-status="done"]') == 3, within=20)
    assert "3/3 done" in text(browser, "svg g.node:nth-of-type(2) text.detail")
    assert attribute(browser, ".job-head", "data-status") == "done"


async def test_workflow_pages_over_http(queue: Queue) -> None:
    wid = await nightly(queue)
    transport = httpx.ASGITransport(app=create_app(queue))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        listed = await http.get("/workflows")
        assert listed.status_code == 200 and f'data-workflow="{wid}"' in listed.text
        page = await http.get(f"/workflows/{wid}")
        assert page.status_code == 200
        assert page.text.count('class="node ') == 3 and "etl.extract" in page.text
        extract = (await queue.get_workflow(wid)).jobs[0]
        assert f'href="/jobs/{extract.id}"' in page.text  # a job's box links to its page
        missing = await http.get("/workflows/999999")
        assert missing.status_code == 404 and "999999" in missing.text
        empty = await http.get("/workflows", headers={"x-aiopgq-live": "1"})
        assert empty.status_code == 200
