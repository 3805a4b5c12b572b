"""The pooler probe (aiopgq/_db/pooler.py) asks once per address that is PostgreSQL itself:
a worker makes several connections at its start, and each probe is a statement."""

from __future__ import annotations

from typing import Any

import pytest

from aiopgq._db import pooler


async def test_an_address_found_direct_is_not_probed_again(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes: list[int] = []
    real = pooler.behind_pooler

    async def counted(conn: Any, **kwargs: Any) -> bool:
        probes.append(conn.get_server_pid())
        return await real(conn, **kwargs)

    monkeypatch.setattr(pooler, "behind_pooler", counted)
    monkeypatch.setattr(pooler, "_direct", set(), raising=False)
    for _ in range(3):  # separate connectors, as a worker's pool, fetcher and listener are
        conn = await pooler.PoolerAwareConnect()(dsn)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()
    assert len(probes) == 1
