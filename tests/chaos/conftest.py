"""Fixtures of the chaos suite: an embedded PostgreSQL of its own, a database per scenario.

The suite never uses DATABASE_URL: one scenario restarts the server, which must not be
anybody else's.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiopgq.embedded import EmbeddedServer, start_throwaway

from ..support.bouncer import start_pgbouncer
from ..support.chaos_harness import Cluster


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    """A throwaway PostgreSQL 18 for this module (restarted in place by a scenario)."""
    try:
        embedded = start_throwaway()
    except Exception as exc:
        pytest.fail(
            f"the chaos suite needs its own embedded PostgreSQL and it did not start ({exc}); "
            "install the test extra: pip install -e '.[test]'",
            pytrace=False,
        )
    with embedded:
        yield embedded


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


@pytest.fixture
async def cluster(
    request: pytest.FixtureRequest, server: EmbeddedServer, tmp_path: Path
) -> AsyncIterator[Callable[..., Cluster]]:
    """Make a `Cluster` on a fresh database of the module's server; kills its workers after."""
    made: list[Cluster] = []
    # Unique per test and parameter (a database name has at most 63 bytes).
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]
    name = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:33] + "_" + digest

    bouncers = contextlib.ExitStack()

    def make(*, via: str = "direct", **options: Any) -> Cluster:
        """`via="pgbouncer"`: the workers connect through a pgbouncer in transaction mode."""
        database = f"{name}_{len(made)}"
        dsn = server.ensure_database(database)
        if via == "pgbouncer":
            bouncer = bouncers.enter_context(start_pgbouncer(dsn, tmp_path / "pgbouncer"))
            options["bouncer_dsn"] = bouncer.dsn
        made.append(Cluster(database, dsn, tmp_path, **options))
        return made[-1]

    with bouncers:
        yield make
        await _close_clusters(request, made)


async def _close_clusters(request: pytest.FixtureRequest, made: list[Cluster]) -> None:
    for c in made:
        if request.node.stash.get(_FAILED, False):
            print(f"\n[chaos] worker logs of {c.name} (seed {c.seed}):")
            print(c.log_tails(c.procs, lines=40))
        await c.close()
