"""Fixtures of the chaos suite: an embedded PostgreSQL of its own, a database per scenario.

The suite never uses DATABASE_URL: one scenario restarts the server, which must not be
anybody else's.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiopgq.embedded import EmbeddedServer, start_throwaway

from .harness import Cluster


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
    name = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]

    def make(**options: Any) -> Cluster:
        database = f"{name}_{len(made)}"
        dsn = server.ensure_database(database)
        made.append(Cluster(database, dsn, tmp_path, **options))
        return made[-1]

    yield make
    for c in made:
        if request.node.stash.get(_FAILED, False):
            print(f"\n[chaos] worker logs of {c.name} (seed {c.seed}):")
            print(c.log_tails(c.procs, lines=40))
        await c.close()
