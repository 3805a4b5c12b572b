"""The command line explains itself: help with defaults and units, --version, options only
where they apply, payloads from stdin or a file, worker settings that reach the worker."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest

import aiopgq
from aiopgq import JobStatus, Queue
from aiopgq._cli import _parser
from aiopgq._cli.worker import worker_options
from aiopgq._db.dsn import redact

from ..support.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
UNITS = {"SECONDS", "N", "JOBS", "BYTES", "PORT", "KEY", "FRACTION", "ID"}


def aiopgq_cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("AIOPGQ_DSN", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "aiopgq", *args],
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version() -> None:
    done = aiopgq_cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"aiopgq {aiopgq.__version__}"


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_every_option_has_help_with_its_default_and_unit(command: str) -> None:
    parser = subcommands()[command]
    text = parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{command} {name} has no help"
        if action.type in (int, float):  # a number says what it counts
            assert action.metavar in UNITS, (command, name)
        if action.option_strings and action.nargs != 0 and action.dest not in ("dsn", "schema"):
            shown = action.help or ""
            assert "default" in shown or action.default is not None, (command, name)
    assert "(default: " in text
    # the help a user reads names its defaults, from the library itself
    if command == "worker":
        assert "--poll-interval SECONDS" in text
        assert "(default: 2.0)" in text and "(default: 0.003)" in text and "--no-listen" in text


def test_server_offers_no_database_options() -> None:
    server_help = aiopgq_cli("server", "--help").stdout
    assert "--dsn" not in server_help and "--schema" not in server_help
    assert "--port" in server_help and "5433" in server_help
    for args in (["--dsn", "postgresql://h/db", "server"], ["--schema", "s", "server"]):
        done = aiopgq_cli(*args)
        assert done.returncode == 2
        assert done.stderr.startswith("aiopgq: `aiopgq server` takes no --"), done.stderr
        assert "starts its own PostgreSQL" in done.stderr
    done = aiopgq_cli("server", "--schema", "s")
    assert done.returncode == 2 and "unrecognized arguments: --schema" in done.stderr
    assert "--schema" not in aiopgq_cli("demo", "--help").stdout


def test_a_bad_dsn_error_shows_the_example_whole() -> None:
    done = aiopgq_cli("--dsn", "bad", "migrate")
    assert done.returncode == 1
    assert done.stderr == (
        "aiopgq: cannot parse the database URL 'bad': it must start with postgresql:// "
        "(for example postgresql://user@host:5432/dbname)\n"
    )


def test_redact_hides_passwords_and_only_them() -> None:
    assert (
        redact("at postgresql://app:s3cr:et@db:5432/x now")
        == "at postgresql://app:***@db:5432/x now"
    )
    assert redact("postgres://:pw@db/x") == "postgres://:***@db/x"
    prose = "must start with postgresql:// (for example postgresql://user@host:5432/dbname)"
    assert redact(prose) == prose
    assert (
        redact("postgresql:// or postgresql://u:pw@h/d")
        == "postgresql:// or postgresql://u:***@h/d"
    )


async def test_payload_from_stdin_and_from_a_file(
    dsn: str, queue: Queue, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    big = {"blob": "x" * 300_000, "n": 1}  # over Linux's 128 KiB limit for one argument
    (tmp_path / "payload.json").write_text(json.dumps(big))
    env = {"AIOPGQ_DSN": dsn}
    common = ["enqueue", "--schema", queue.schema, "demo.big"]
    from_stdin = aiopgq_cli(*common, "-", stdin=json.dumps(big), env=env)
    from_file = aiopgq_cli(*common, f"@{tmp_path / 'payload.json'}", env=env)
    for done in (from_stdin, from_file):
        assert done.returncode == 0, done.stderr
        job = await queue.get_job(int(done.stdout))
        assert job.payload == big
    too_big = aiopgq_cli(
        *common, "-", "--max-payload-bytes", "1000", stdin=json.dumps(big), env=env
    )
    assert too_big.returncode == 1 and "over the 1000-byte limit" in too_big.stderr

    cases = {
        f"@{tmp_path / 'missing.json'}": "aiopgq: cannot read payload file ",
        "-": "aiopgq: the payload on standard input is not valid JSON",
    }
    for payload, message in cases.items():
        done = aiopgq_cli(*common, payload, stdin="[1, 2", env=env)
        assert done.returncode == 2 and done.stderr.startswith(message), done.stderr
        assert "Traceback" not in done.stderr
    done = aiopgq_cli(*common, "-", stdin="[1, 2]", env=env)
    assert done.returncode == 2 and "must be a JSON object" in done.stderr
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 2


async def test_enqueue_options_reach_the_job(dsn: str, queue: Queue) -> None:
    args = ["enqueue", "--schema", queue.schema, "demo.x", '{"a": 1}', "--queue", "q1"]
    args += ["--priority", "7", "--max-attempts", "2", "--delay", "60", "--idempotency-key", "k"]
    first = aiopgq_cli(*args, env={"AIOPGQ_DSN": dsn})
    again = aiopgq_cli(*args, env={"AIOPGQ_DSN": dsn})
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert first.stdout == again.stdout  # the key's live job
    job = await queue.get_job(int(first.stdout))
    assert (job.queue, job.priority, job.max_attempts) == ("q1", 7, 2)
    assert 50 < (job.run_at - job.created_at).total_seconds() < 70


def test_every_worker_flag_reaches_the_worker() -> None:
    given = {
        "concurrency": 3,
        "poll_interval": 0.5,
        "recheck_interval": 0.02,
        "heartbeat_interval": 1.0,
        "visibility_timeout": 9.0,
        "grace_period": 4.0,
        "completion_interval": 0.05,
        "completion_batch_size": 77,
        "maintenance_interval": 2.5,
        "blocked_loop_warning": 0.0,
        "connect_timeout": 12.0,
        "retention": 60.0,
        "failed_retention": None,  # --failed-retention None: keep them
        "cancelled_retention": 7.0,
    }
    argv = ["worker", "m:q", "--no-listen", "--hold-transaction"]
    for name, value in given.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    options = worker_options(_parser().parse_args(argv))
    assert options == {**given, "listen": False, "hold_transaction": True}
    worker = Queue("postgresql://h/db").worker(queues=["default"], **options)
    for name, value in options.items():
        assert getattr(worker, name) == value, name
    assert worker_options(_parser().parse_args(["worker", "m:q"])) == {}  # Worker's defaults


def listeners_of(pid: int) -> str:
    return (
        "SELECT count(*) FROM pg_stat_activity "
        f"WHERE application_name LIKE 'aiopgq-listener %:{pid}:%'"
    )


def start_worker(dsn: str, schema: str, *flags: str) -> subprocess.Popen[str]:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_TEST_SCHEMA": schema, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiopgq",
            "worker",
            "tests.support.app:queue",
            "--poll-interval=0.2",
            *flags,
        ],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_no_listen_worker_polls_without_a_listen_connection(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    polling = start_worker(dsn, queue.schema, "--no-listen")
    try:
        job = await queue.enqueue("app.noop", {"n": 1})

        async def done() -> bool:
            return (await queue.get_job(job.id)).status is JobStatus.DONE

        await eventually(done)  # found by polling (a listener would be up before any claim)
        assert await conn.fetchval(listeners_of(polling.pid)) == 0
    finally:
        polling.terminate()
        assert polling.wait(20) == 0
    listening = start_worker(dsn, queue.schema)  # the control: the query sees a listener
    try:
        await eventually(lambda: conn.fetchval(listeners_of(listening.pid)))
    finally:
        listening.terminate()
        assert listening.wait(20) == 0


async def test_worker_dsn_flag_serves_a_module_whose_queue_reads_the_environment(
    dsn: str, queue: Queue, tmp_path: Path
) -> None:
    (tmp_path / "envapp.py").write_text(
        "from aiopgq import Queue\n"
        "queue = Queue()  # AIOPGQ_DSN\n"
        "@queue.task(name='env.add')\n"
        "async def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
    )
    enqueued = aiopgq_cli(
        "--dsn", dsn, "enqueue", "--schema", queue.schema, "env.add", '{"a": 1, "b": 2}'
    )
    assert enqueued.returncode == 0, enqueued.stderr
    started = time.monotonic()
    work = aiopgq_cli(
        "worker", "envapp:queue", "--dsn", dsn, "--schema", queue.schema, "--burst", cwd=tmp_path
    )
    assert work.returncode == 0, work.stderr
    assert time.monotonic() - started < 30
    assert (await queue.get_job(int(enqueued.stdout))).result == 3
    no_dsn = aiopgq_cli("worker", "envapp:queue", "--burst", cwd=tmp_path)
    assert no_dsn.returncode == 1
    assert no_dsn.stderr.startswith("aiopgq: no database given"), no_dsn.stderr
    assert "AIOPGQ_DSN" in no_dsn.stderr and "Traceback" not in no_dsn.stderr


def test_worker_target_that_runs_asyncio_at_import_is_told_why(tmp_path: Path) -> None:
    (tmp_path / "eager.py").write_text(
        "import asyncio\n"
        "from aiopgq import Queue\n"
        "queue = Queue('postgresql://127.0.0.1/x')\n"
        "async def main() -> None: ...\n"
        "asyncio.run(main())\n"
    )
    done = aiopgq_cli("worker", "eager:queue", cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("aiopgq: importing 'eager' runs an event loop"), done.stderr
    assert 'under `if __name__ == "__main__":`' in done.stderr
