"""The README's Dashboard examples run as pasted (tests/support/newcomer.py)."""

from __future__ import annotations

import httpx

from ..support.markdown import blocks
from ..support.newcomer import Newcomer, free_port, wait_for


def test_dashboard_examples_run_as_pasted(newcomer: Newcomer) -> None:
    found = blocks("dashboard")
    assert [b.language for b in found] == ["bash", "python", "bash"]
    ports = [free_port(), free_port()]
    # As written, but on free ports: 8080 and 8000 may be taken on a shared machine.
    newcomer.paste(found[0], extra=f" --port {ports[0]}")
    newcomer.paste(found[1])
    newcomer.paste(found[2], extra=f" --port {ports[1]}")

    def serving(url: str) -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    standalone = f"http://127.0.0.1:{ports[0]}/"
    mounted = f"http://127.0.0.1:{ports[1]}/queue/"
    wait_for(lambda: serving(standalone), 30, "aiopgq dashboard", newcomer)
    wait_for(lambda: serving(mounted), 30, "the dashboard mounted in ops.py", newcomer)
    assert "read-only" in httpx.get(standalone).text  # no token set
    page = httpx.get(mounted + "jobs").text
    assert 'href="/queue/static/dashboard.css"' in page and "<h1>Jobs</h1>" in page
    refused = httpx.post(mounted + "api/queues/pause", data={"queue": "emails"})
    assert refused.status_code == 403
    logs = newcomer.press_ctrl_c()
    assert "aiopgq dashboard for schema aiopgq: http://127.0.0.1:" in "".join(logs.values())
