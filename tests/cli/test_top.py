"""`aiopgq top` under a pseudo-terminal, against a running worker process: it shows the
queues and the live worker, refreshes, and quits cleanly on q and on Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time

import asyncpg
import pexpect

from aiopgq import Queue

from ..support.cli import ROOT, cli, run_cli
from ..support.helpers import eventually

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def spawn_top(dsn: str, schema: str) -> pexpect.spawn:
    # The terminal's size is the pseudo-terminal's: COLUMNS and LINES set by a parent
    # (pytest-xdist's workers have them) would override it and cut the table's cells.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "LINES": "40"}
    return pexpect.spawn(
        sys.executable,
        ["-m", "aiopgq", "--dsn", dsn, "--schema", schema, "top", "--interval", "0.3"],
        env=env,
        cwd=str(ROOT),
        dimensions=(40, 200),
        encoding="utf-8",
        # Ctrl-C makes the terminal drop the output in flight, which can end mid-character.
        codec_errors="replace",
        timeout=30,
    )


def screen_until(child: pexpect.spawn, pattern: str, within: float = 60.0) -> str:
    """Read the terminal until `pattern` shows (ANSI codes stripped); the text read.

    top refreshes forever, so output never stops: the deadline ends a wait for a screen
    that never comes, with the last screen in the message."""
    seen = ""
    deadline = time.monotonic() + within
    while not re.search(pattern, seen):
        assert time.monotonic() < deadline, f"no {pattern!r} within {within} s:\n{seen[-3000:]}"
        child.expect(r"\S", timeout=30)
        seen += ANSI.sub("", child.before + child.after)
    return seen


def watch_and_quit(dsn: str, schema: str, worker_id: str, key: str) -> tuple[str, str, int]:
    child = spawn_top(dsn, schema)
    try:
        # default: 0 pending, 1 scheduled, 2 running; unserved: 1 pending, oldest > 0
        screen = screen_until(child, r"default\s*│\s*0\s*│\s*1\s*│\s*2\s*│")
        screen += screen_until(child, r"unserved\s*│\s*1\s*│\s*0\s*│\s*0\s*│")
        screen += screen_until(child, re.escape(worker_id) + r".*│\s*2/2\s*│")
        first = child.before
        screen_until(child, r"\d\d:\d\d:\d\d")  # refreshes: another frame comes
        if key == "q":
            child.send("q")
        else:
            child.sendintr()
        child.expect(pexpect.EOF, timeout=15)
        tail = child.before or first
    finally:
        child.close(force=True)
    return screen, tail, child.exitstatus if child.exitstatus is not None else -1


async def test_top_shows_the_queues_and_the_live_worker_and_quits_on_q_and_ctrl_c(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    await queue.enqueue_many("app.sleep", [{"seconds": 3600}] * 2)
    await queue.enqueue("app.noop", {"n": 1}, delay=600)
    await queue.enqueue("app.noop", {"n": 2}, queue="unserved")
    proc = cli(
        dsn,
        queue.schema,
        "worker",
        "tests.support.app:queue",
        "--concurrency",
        "2",
        "--grace-period",
        "0",
    )
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 2 FROM {ledger}"), within=30)
        worker_id = await conn.fetchval(f'SELECT id FROM "{queue.schema}".workers')
        for key in ("q", "ctrl-c"):
            screen, tail, status = await asyncio.to_thread(
                watch_and_quit, dsn, queue.schema, worker_id, key
            )
            assert status == 0, (key, tail)
            assert "\x1b[?1049l" in tail  # left the alternate screen: the terminal is back
            assert f"{os.uname().nodename}" in screen
        once = run_cli(dsn, queue.schema, "--dsn", dsn, "--schema", queue.schema, "top", "--once")
        assert once.returncode == 0, once.stderr
        assert worker_id in once.stdout and "unserved" in once.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def test_top_and_workers_on_a_schema_without_tables_say_to_migrate(dsn: str, schema: str) -> None:
    for command in (["top", "--once"], ["workers"]):
        done = run_cli(dsn, schema, "--dsn", dsn, "--schema", schema, *command)
        assert done.returncode == 1
        assert "aiopgq migrate" in done.stderr and "Traceback" not in done.stderr
