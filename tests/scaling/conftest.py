"""Fixtures of the scale-out tests: a pgbouncer in transaction mode before the test's server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.bouncer import Bouncer, start_pgbouncer


@pytest.fixture
def bouncer(dsn: str, tmp_path: Path) -> Iterator[Bouncer]:
    with start_pgbouncer(dsn, tmp_path / "pgbouncer", pool_size=4) as running:
        yield running
