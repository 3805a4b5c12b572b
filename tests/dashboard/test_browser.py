"""The dashboard end to end: `aiopgq dashboard` served, driven by a real headless Chromium."""

from __future__ import annotations

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from aiopgq import Job, JobStatus, Queue, Retry

from ..helpers import eventually
from .conftest import TOKEN, Dashboard, start_dashboard, stop


def rows(browser: webdriver.Chrome, selector: str) -> list[WebElement]:
    return browser.find_elements(By.CSS_SELECTOR, selector)


def flash(browser: webdriver.Chrome) -> str:
    element = browser.find_element(By.ID, "flash")
    return "" if element.get_attribute("hidden") is not None else element.text


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
    (row,) = rows(browser, 'tr[data-queue="reports"]')
    assert row.find_elements(By.TAG_NAME, "td")[1].text == "1"  # runnable

    # The page refreshes its table by itself: a job enqueued now shows up.
    await queue.enqueue("report.build", {"month": "2026-12"}, queue="reports")

    def runnable() -> str:
        found = rows(browser, 'tr[data-queue="reports"] td')
        return found[1].text if found else ""

    await eventually(lambda: runnable() == "2", within=15)
    assert browser.find_element(By.ID, "live-state").text.startswith("live")

    browser.get(dashboard.url + "/jobs?queue=reports&status=pending")
    listed = rows(browser, "tr[data-job]")
    assert [r.get_attribute("data-job") for r in listed] == [str(first.id + 1), str(first.id)]
    browser.find_element(By.LINK_TEXT, str(first.id)).click()
    await eventually(lambda: browser.title == f"Job {first.id} · aiopgq {queue.schema}")
    payload = browser.find_element(By.CSS_SELECTOR, "pre.json").text
    assert '"month": "2026-11"' in payload
    assert browser.find_element(By.CSS_SELECTOR, ".job-head .status").text == "pending"


async def test_a_retry_click_requeues_a_failed_job(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    job = await failed_job(queue)
    browser.get(f"{dashboard.url}/jobs/{job.id}")
    head = browser.find_element(By.CSS_SELECTOR, ".job-head")
    assert head.get_attribute("data-status") == "failed"
    errors = browser.find_element(By.CSS_SELECTOR, "details[open] summary").text
    assert "ConnectionError: smtp down while sending to ada@example.com" in errors

    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "button.retry").click()
    await eventually(lambda: "re-queued" in flash(browser), within=15)
    requeued = await queue.get_job(job.id)
    assert (requeued.status, requeued.attempts) == (JobStatus.PENDING, 0)
    await eventually(
        lambda: rows(browser, '.job-head[data-status="pending"]'), within=15
    )  # the page shows it without a reload

    # The token stays for the session: the jobs page can act too (cancel, confirmed).
    browser.get(f"{dashboard.url}/jobs?status=pending")
    rows(browser, f'tr[data-job="{job.id}"] button.cancel')[0].click()
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
    rows(browser, f'tr[data-job="{job.id}"] button.retry')[0].click()
    await eventually(lambda: "needs the dashboard token" in flash(browser), within=15)
    assert "refused" in (browser.find_element(By.ID, "flash").get_attribute("class") or "")

    browser.find_element(By.ID, "token").send_keys("not-the-token")
    rows(browser, f'tr[data-job="{job.id}"] button.retry')[0].click()
    await eventually(lambda: "wrong dashboard token" in flash(browser), within=15)
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED  # nothing happened


async def test_pause_and_resume_clicks(
    queue: Queue, dashboard: Dashboard, browser: webdriver.Chrome
) -> None:
    await queue.enqueue("mail.send", {"to": "x"}, queue="emails")
    browser.get(dashboard.url + "/")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"] button.pause').click()
    browser.switch_to.alert.accept()
    await eventually(lambda: rows(browser, 'tr[data-queue="emails"] .badge.paused'), within=15)
    assert await queue.paused_queues() == ["emails"]

    browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"] button.resume').click()
    await eventually(lambda: rows(browser, 'tr[data-queue="emails"] .badge.active'), within=15)
    assert await queue.paused_queues() == []


async def test_a_dashboard_without_a_token_is_read_only(
    dsn: str, queue: Queue, browser: webdriver.Chrome
) -> None:
    job = await failed_job(queue)
    running = start_dashboard(dsn, queue.schema)  # no --token, no AIOPGQ_DASHBOARD_TOKEN
    try:
        browser.get(f"{running.url}/jobs/{job.id}")
        assert browser.find_element(By.CSS_SELECTOR, ".badge.read-only").text == "read-only"
        assert not rows(browser, "button") and not rows(browser, "#token")
    finally:
        code, out, err = stop(running.process)
    assert (code, err) == (0, ""), (code, err)
    assert "read-only" in out, out
