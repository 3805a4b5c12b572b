"""The README's SyncQueue example (signup.py) runs as written, in a script of its own."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg

from aiopgq import Queue

from ..support.markdown import ROOT, section_files


async def test_the_readme_example_runs_as_written(dsn: str, tmp_path: Path) -> None:
    script = section_files("Enqueue from synchronous code: SyncQueue")["signup.py"]
    (tmp_path / "signup.py").write_text(script)
    # A database of its own: the example uses the default schema, aiopgq.
    database = f"readme_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(dsn)
    own_dsn = urlunsplit(parts._replace(path=f"/{database}"))
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'CREATE DATABASE "{database}"')
    try:
        await Queue(own_dsn).migrate()
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(AIOPGQ_DSN=own_dsn, PYTHONPATH=str(ROOT))
        result = await anyio.run_process(
            [sys.executable, "signup.py"], cwd=tmp_path, env=env, check=False
        )
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout.decode() == "pending\n"
        conn = await asyncpg.connect(own_dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM signups") == 1
            assert await conn.fetchval("SELECT count(*) FROM aiopgq.jobs") == 3
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
        await admin.close()
