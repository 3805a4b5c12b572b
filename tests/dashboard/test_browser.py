"""The dashboard end to end: `aiopgq dashboard` served, driven by a real headless Chromium."""

from __future__ import annotations

import time

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from aiopgq import Job, JobContext, JobStatus, Queue, Retry

from ..support.dashboard import TOKEN, Dashboard, start_dashboard, stop
from ..support.helpers import eventually

# The page swaps its live region in whenever it changed (ages change every second), so
# an element found a moment ago may be gone: reads go through one script call, clicks
# find their element again until one lands.


def rows(browser: webdriver.Chrome, selector: str) -> list[WebElement]:
    return browser.find_elements(By.CSS_SELECTOR, selector)


def text(browser: webdriver.Chrome, selector: str) -> str:
    found = browser.execute_script(
        "var e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        selector,
    )
    return "" if found is None else str(found).strip()


def count(browser: webdriver.Chrome, selector: str) -> int:
    return int(
        browser.execute_script("return document.querySelectorAll(arguments[0]).length;", selector)
    )


def attribute(browser: webdriver.Chrome, selector: str, name: str) -> str | None:
    found = browser.execute_script(
        "var e = document.querySelector(arguments[0]); "
        "return e ? e.getAttribute(arguments[1]) : null;",
        selector,
        name,
    )
    return None if found is None else str(found)


def click(browser: webdriver.Chrome, selector: str) -> None:
    for _ in range(50):
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
            return
        except (StaleElementReferenceException, NoSuchElementException):
            time.sleep(0.05)
    raise AssertionError(f"nothing to click at {selector}")


def flash(browser: webdriver.Chrome) -> str:
    if attribute(browser, "#flash", "hidden") is not None:
        return ""
    return text(browser, "#flash")


async def failed_job(queue: Queue) -> Job:
    """A job that really failed: a worker ran it and it raised on its only attempt."""

    @queue.task(name="mail.send", queue="emails", max_attempts=1, retry=Retry(base=0))
    async def send(to: str) -> None:
        raise ConnectionError(f"smtp down while sending to {to}")

    job = await send.enqueue("ada@example.com")
    await queue.worker(queues=["emails"]).run(burst=True)
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED
    return job


async def test_the_pages_load_and_show_an_enqueued_job_live(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    first = await queue.enqueue("report.build", {"month": "2026-11"}, queue="reports")
    browser.get(dashboard.url + "/")
    assert browser.title == f"Queues · aiopgq {queue.schema}"
    runnable = 'tr[data-queue="reports"] td:nth-child(2)'
    assert text(browser, runnable) == "1"

    # The page refreshes its table by itself: a job enqueued now shows up.
    second = await queue.enqueue("report.build", {"month": "2026-12"}, queue="reports")
    await eventually(lambda: text(browser, runnable) == "2", within=15)
    assert text(browser, "#live-state").startswith("live")

    browser.get(dashboard.url + "/jobs?queue=reports&status=pending")
    listed = browser.execute_script(
        "return Array.from(document.querySelectorAll('tr[data-job]'), r => r.dataset.job);"
    )
    assert listed == [str(second.id), str(first.id)]
    click(browser, f'tr[data-job="{first.id}"] td a')
    await eventually(lambda: browser.title == f"Job {first.id} · aiopgq {queue.schema}")
    assert '"month": "2026-11"' in text(browser, "pre.json")
    assert text(browser, ".job-head .status") == "pending"


async def test_a_retry_click_requeues_a_failed_job(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    job = await failed_job(queue)
    browser.get(f"{dashboard.url}/jobs/{job.id}")
    assert attribute(browser, ".job-head", "data-status") == "failed"
    errors = text(browser, "details[open] summary")
    assert "ConnectionError: smtp down while sending to ada@example.com" in errors

    browser.find_element(By.ID, "token").send_keys(TOKEN)
    click(browser, "button.retry")
    await eventually(lambda: "re-queued" in flash(browser), within=15)
    requeued = await queue.get_job(job.id)
    assert (requeued.status, requeued.attempts) == (JobStatus.PENDING, 0)
    # the page shows it without a reload
    await eventually(lambda: count(browser, '.job-head[data-status="pending"]'), within=15)

    # The token stays for the session: the jobs page can act too (cancel, confirmed).
    browser.get(f"{dashboard.url}/jobs?status=pending")
    click(browser, f'tr[data-job="{job.id}"] button.cancel')
    browser.switch_to.alert.accept()
    await eventually(lambda: "cancelled" in flash(browser), within=15)
    assert (await queue.get_job(job.id)).status is JobStatus.CANCELLED


async def test_an_action_without_the_token_is_refused(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    job = await failed_job(queue)
    browser.get(f"{dashboard.url}/jobs?status=failed")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    click(browser, f'tr[data-job="{job.id}"] button.retry')
    await eventually(lambda: "needs the dashboard token" in flash(browser), within=15)
    assert attribute(browser, "#flash", "class") == "refused"

    browser.find_element(By.ID, "token").send_keys("not-the-token")
    click(browser, f'tr[data-job="{job.id}"] button.retry')
    await eventually(lambda: "wrong dashboard token" in flash(browser), within=15)
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED  # nothing happened


async def test_pause_and_resume_clicks(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    await queue.enqueue("mail.send", {"to": "x"}, queue="emails")
    browser.get(dashboard.url + "/")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    click(browser, 'tr[data-queue="emails"] button.pause')
    browser.switch_to.alert.accept()
    await eventually(lambda: count(browser, 'tr[data-queue="emails"] .badge.paused'), within=15)
    assert await queue.paused_queues() == ["emails"]

    click(browser, 'tr[data-queue="emails"] button.resume')
    await eventually(lambda: count(browser, 'tr[data-queue="emails"] .badge.active'), within=15)
    assert await queue.paused_queues() == []


async def test_a_dashboard_without_a_token_is_read_only(
    dsn: str, queue: Queue, browser: webdriver.Chrome
) -> None:
    job = await failed_job(queue)
    running = start_dashboard(dsn, queue.schema)  # no --token, no AIOPGQ_DASHBOARD_TOKEN
    try:
        browser.get(f"{running.url}/jobs/{job.id}")
        assert text(browser, ".badge.read-only") == "read-only"
        assert count(browser, "button") == 0 and count(browser, "#token") == 0
    finally:
        code, out, err = stop(running.process)
    assert code == 0 and err.startswith("warning: reads need no token: every user"), (code, err)
    assert "read-only" in out, out


async def test_the_job_page_follows_a_job_that_waits_for_an_event(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    @queue.task(name="shop.order", queue="orders")
    async def order(ctx: JobContext) -> str:
        await ctx.step("reserve", lambda: "r-1")
        paid = await ctx.wait_event("payment:7")
        return str(paid)

    job = await order.enqueue()
    await queue.worker(queues=["orders"]).run(burst=True)
    browser.get(f"{dashboard.url}/jobs/{job.id}")
    assert text(browser, ".job-head .status") == "waiting"
    assert text(browser, "#steps .waits") == "Waits for: event payment:7"
    assert text(browser, "#steps tbody tr td:nth-child(2)") == "reserve"
    await queue.emit_event("payment:7", "ok")
    await queue.worker(queues=["orders"]).run(burst=True)
    # The live page refreshes by itself: done, the wait recorded as a step, no wait left.
    await eventually(lambda: text(browser, ".job-head .status") == "done", within=15)
    names = browser.execute_script(
        "return Array.from(document.querySelectorAll('#steps tbody tr td:nth-child(2)'),"
        " c => c.textContent);"
    )
    assert names == ["reserve", "event:payment:7"]
    assert not browser.find_elements("css selector", "#steps .waits")
