"""`aiopgq demo` end to end: on a given server, on the embedded one, and its failure modes."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from aiopgq._cli.demo import _Run, _table, run_demo
from aiopgq._embedded.data import FALLBACK_DATA_BASES
from aiopgq.embedded import persistent_data_dir

IS_ROOT = os.geteuid() == 0
EXTERNAL_DSN = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
ROWS = ("jobs", "enqueue rate", "drain rate", "latency p50", "latency p99", "PostgreSQL", "DSN")


def table_of(out: str) -> dict[str, str]:
    """The printed result table as {row name: value}."""
    rows = {}
    for line in out.splitlines():
        for name in (*ROWS, "data"):
            if line.startswith(name + "  "):
                rows[name] = line[len(name) :].strip()
    return rows


def fetch(dsn: str, sql: str) -> object:
    async def go() -> object:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    # pytest's tmp_path sits under a 0700 folder, out of the server account's reach as root.
    folder = Path(tempfile.mkdtemp(prefix="aiopgq-demo-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def check_table(rows: dict[str, str], jobs: int, samples: int) -> None:
    assert set(rows) == {*ROWS, "data"}, rows
    assert rows["jobs"] == f"{jobs:,}"
    for name in ("enqueue rate", "drain rate"):
        assert re.fullmatch(r"[\d,]+ jobs/s \(.*\)", rows[name]), rows[name]
        assert int(rows[name].split()[0].replace(",", "")) > 0
    p50 = float(rows["latency p50"].split()[0])
    p99 = float(rows["latency p99"].split()[0])
    assert 0 < p50 <= p99 < 1000  # an idle worker woken by NOTIFY, not by the 1 s poll
    assert f"({samples} single enqueues)" in rows["latency p99"]


def test_demo_on_a_given_server(capsys: pytest.CaptureFixture[str]) -> None:
    schema = f"demo_{uuid.uuid4().hex[:12]}"
    try:
        code = run_demo(EXTERNAL_DSN, jobs=2000, latency_samples=20, schema=schema)
        out, err = capsys.readouterr()
        assert code == 0, err
        rows = table_of(out)
        check_table(rows, 2000, 20)
        assert rows["data"] == "external server"
        assert rows["DSN"] == re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", EXTERNAL_DSN)
        assert "2000/2000" in out  # the progress bar's last state
        done = fetch(EXTERNAL_DSN, f"SELECT count(*) FROM {schema}.jobs WHERE status = 'done'")
        assert done == 2020  # every bulk job and every latency job, each once
    finally:
        fetch(EXTERNAL_DSN, f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_demo_on_the_embedded_server(
    reachable_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(reachable_tmp))  # not the real home
    code = run_demo(None, jobs=300, latency_samples=10)
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = table_of(out)
    check_table(rows, 300, 10)
    data = reachable_tmp / "aiopgq" / "pg18"
    assert rows["data"] == f"{data} (embedded, persistent)"
    assert rows["PostgreSQL"].startswith("18.")
    # Its Unix socket, in the data folder: no TCP.
    socket = re.escape(f"postgresql://postgres@/postgres?host={data}&port=")
    assert re.fullmatch(rf"{socket}\d+", rows["DSN"])
    assert (data / "PG_VERSION").is_file()
    assert not (data / "postmaster.pid").exists()  # the server was stopped

    # A rerun starts clean: the schema is dropped and migrated again.
    assert run_demo(None, jobs=100, latency_samples=5) == 0
    assert table_of(capsys.readouterr().out)["jobs"] == "100"


def test_root_demo_data_falls_back_when_home_is_out_of_reach(
    reachable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = reachable_tmp / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    data_dir, replaced = persistent_data_dir()
    default = home / ".local" / "share" / "aiopgq" / "pg18"
    if IS_ROOT:  # postgres cannot enter a 0700 home: a persistent place it can reach
        assert replaced == default
        assert data_dir in [base / "pg18" for base in FALLBACK_DATA_BASES]
    else:  # we are the server account: our own home is fine
        assert (data_dir, replaced) == (default, None)
    assert not (home / ".local").exists()  # choosing creates nothing


def test_demo_on_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_demo("postgresql://demo:s3cret@127.0.0.1:1/nowhere", jobs=10, latency_samples=1)
    out, err = capsys.readouterr()
    assert code == 1
    assert "cannot connect to postgresql://demo:***@127.0.0.1:1/nowhere" in err
    assert "--dsn" in err and "s3cret" not in out + err


def test_table_redacts_the_password() -> None:
    run = _Run(jobs=10, samples=2, latencies=[0.001, 0.003], version="18.6")
    run.enqueue_seconds = run.drain_seconds = 0.5
    rows = table_of(_table(run, "postgresql://app:hunter2@db:5432/app", "external server"))
    assert rows["DSN"] == "postgresql://app:***@db:5432/app"
    assert rows["latency p50"].startswith("2.0 ms") and rows["latency p99"].startswith("3.0 ms")
    assert rows["enqueue rate"].startswith("20 jobs/s")
