"""The limited claim's SQL: counts taken after the lock, the token bucket, the key walk."""

from __future__ import annotations

import asyncio
import random
import time

import asyncpg

from aiopgq import Queue

from ..support.helpers import eventually
from ..support.legacy_schema import install_up_to


async def claim(
    conn: asyncpg.Connection, queue: Queue, queues: list[str], limit: int, worker: str = "w"
) -> list[asyncpg.Record]:
    """The limited claim as a worker runs it; only the job rows."""
    rows = await conn.fetch(
        queue.sql.dequeue_limited, queues, limit, worker, True, "{}", "{}", [], None
    )
    return [row for row in rows if row[0] is not None]


async def test_a_claim_that_waited_for_the_lock_counts_what_its_peer_committed(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    # Two claims at once must not both see the same running count. The second waits
    # for the first's lock; in READ COMMITTED its statement's snapshot predates the
    # first's commit, so a count taken by the statement itself would miss those jobs
    # and start more than the limit allows. The count is taken after the lock.
    await queue.configure("default", concurrency=3)
    await queue.enqueue_many("t", [{}] * 20)
    a, b = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        first = a.transaction()
        await first.start()
        assert len(await claim(a, queue, ["default"], 2, "a")) == 2
        second = asyncio.ensure_future(claim(b, queue, ["default"], 10, "b"))

        async def b_waits_for_the_lock() -> bool:
            return bool(
                await conn.fetchval(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity s USING (pid) "
                    "WHERE NOT l.granted AND l.locktype = 'advisory' AND s.pid = $1",
                    b.get_server_pid(),
                )
            )

        await eventually(b_waits_for_the_lock)
        await first.commit()
        assert len(await second) == 1
    finally:
        await a.close()
        await b.close()
    running = await conn.fetchval(
        f"SELECT count(*) FROM \"{queue.schema}\".jobs WHERE status = 'running'"
    )
    assert running == 3


async def test_unlimited_queues_never_call_the_limited_claim(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # Queues without limits are claimed by the plain statement: without the limited
    # claim's function at all, a worker of such queues still drains them.
    await queue.configure("exports", concurrency=1)  # another queue has limits
    await conn.execute(f'DROP FUNCTION "{queue.schema}".claim_limited')
    ran: list[int] = []

    @queue.task(name="plain")
    async def plain(n: int) -> None:
        ran.append(n)

    await queue.enqueue_many("plain", [{"n": n} for n in range(50)])
    await queue.worker(queues=["default", "other"]).run(burst=True)
    assert sorted(ran) == list(range(50))


async def test_token_bucket_bounds_starts_under_concurrent_claims(dsn: str, queue: Queue) -> None:
    rate, burst = 200.0, 20
    await queue.configure("default", rate=rate, burst=burst)
    await queue.enqueue_many("t", [{}] * 5000)
    claimed: list[tuple[float, int]] = []  # (time the claim returned, jobs)

    async def claimer(name: str) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            deadline = time.time() + 2.0
            while time.time() < deadline:
                rows = await claim(conn, queue, ["default"], 50, name)
                claimed.append((time.time(), len(rows)))
                await asyncio.sleep(0.002)
        finally:
            await conn.close()

    start = time.time()
    await asyncio.gather(*(claimer(f"w{i}") for i in range(4)))
    elapsed = time.time() - start
    total = sum(n for _, n in claimed)
    assert total <= burst + rate * elapsed
    assert total >= 0.5 * rate * elapsed  # and the rate is reached
    # Any half-second window: at most burst + rate x (window + the time a claim's
    # reply takes to arrive here, generously 0.1 s).
    for t0, _ in claimed:
        window = sum(n for t, n in claimed if t0 <= t < t0 + 0.5)
        assert window <= burst + rate * 0.6, (t0 - start, window)


async def test_key_round_robin_reads_a_few_index_entries_past_a_big_backlog(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # One key with 100,000 pending jobs ahead of 25 small keys: a claim of a
    # key-limited queue descends the pending-by-key index once per key, instead of
    # walking the big key's backlog to find the others.
    table = f'"{queue.schema}".jobs'
    await conn.execute(
        f"INSERT INTO {table} (task, concurrency_key) SELECT 't', 'big' "
        "FROM generate_series(1, 100000)"
    )
    await conn.execute(
        f"INSERT INTO {table} (task, concurrency_key) SELECT 't', 'small' || (g % 25) "
        "FROM generate_series(1, 2500) g"
    )
    await conn.execute(f"ANALYZE {table}")
    await queue.configure("default", key_concurrency=2)
    entries_read = (
        "SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) "
        "+ pg_stat_get_xact_tuples_returned($1::regclass) "
        "FROM pg_index i WHERE i.indrelid = $1::regclass"
    )
    keys_seen: set[str] = set()
    for _ in range(3):
        async with conn.transaction():
            before = await conn.fetchval(entries_read, table)
            rows = await claim(conn, queue, ["default"], 60)
            read = await conn.fetchval(entries_read, table) - before
        assert read < 2000, read
        keys = await conn.fetch(
            f"SELECT concurrency_key, count(*) FROM {table} WHERE id = ANY($1) GROUP BY 1",
            [row[0] for row in rows],
        )
        assert all(row["count"] <= 2 for row in keys)
        keys_seen.update(row["concurrency_key"] for row in keys)
    assert keys_seen == {"big", *(f"small{i}" for i in range(25))}
    per_key = await conn.fetch(
        f"SELECT concurrency_key, count(*) FROM {table} WHERE status = 'running' GROUP BY 1"
    )
    assert {row["count"] for row in per_key} == {2}  # every key at its limit, none over


async def test_no_index_on_jobs_until_a_queue_gets_a_key_limit(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    # Every index on jobs costs every insert statement, so flow control adds none, and
    # nothing does until a queue's key limit needs the index of pending jobs by key.
    quoted = f'"{schema}"'
    indexes = (
        "SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_index i "
        f"JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = '{quoted}.jobs'::regclass "
        "AND i.indisvalid"
    )
    await install_up_to(conn, schema, 15)
    before = await conn.fetchval(indexes)
    queue = Queue(dsn, schema=schema)
    await install_up_to(conn, schema, 19, after=15)
    assert 21 in await queue.migrate()
    assert await conn.fetchval(indexes) == before
    async with queue:
        await queue.configure("default", concurrency=3, rate=10.0)
        assert await conn.fetchval(indexes) == before
        await queue.configure("default", key_concurrency=2)
        await queue.configure("other", key_concurrency=5)  # built once
    assert await conn.fetchval(indexes) == sorted([*before, "jobs_pending_key_idx"])


async def test_lane_and_whole_queue_claims_together_never_pass_the_limit(
    dsn: str, queue: Queue
) -> None:
    # concurrency=40: claims take one of 4 lanes for at most 5 jobs while at most 20 run,
    # all 4 lanes and an exact count above that. 8 claimers (holding their transaction
    # open a little), a completer and a monitor sampling the committed running count.
    limit = 40
    await queue.configure("default", concurrency=limit)
    await queue.enqueue_many("t", [{}] * 20_000)
    table = f'"{queue.schema}".jobs'
    stop = time.monotonic() + 3.0
    seen: list[int] = []
    claimed = [0]
    rng = random.Random(40)

    async def claimer(name: str) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            while time.monotonic() < stop:
                async with conn.transaction():
                    rows = await claim(conn, queue, ["default"], rng.randint(1, 12), name)
                    await asyncio.sleep(rng.random() * 0.003)
                claimed[0] += len(rows)
        finally:
            await conn.close()

    async def completer() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            while time.monotonic() < stop:
                await conn.execute(
                    f"UPDATE {table} SET status = 'done', heartbeat_at = NULL WHERE id IN "
                    f"(SELECT id FROM {table} WHERE status = 'running' ORDER BY random() LIMIT 6)"
                )
                await asyncio.sleep(0.002)
        finally:
            await conn.close()

    async def monitor() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            while time.monotonic() < stop:
                seen.append(
                    await conn.fetchval(f"SELECT count(*) FROM {table} WHERE status = 'running'")
                )
        finally:
            await conn.close()

    await asyncio.gather(*(claimer(f"w{i}") for i in range(8)), completer(), monitor())
    assert claimed[0] > 500  # the claims kept going
    assert max(seen) <= limit
    assert max(seen) > 30  # past the lanes' range (20): whole-queue claims took over


async def test_claims_in_lanes_take_a_share_each_and_the_rest_is_counted_exactly(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    # concurrency=40: four claims at once may each hold a lane and take a share (40 / 8
    # = 5) without seeing one another; a fifth waits for a lane; past 20 running,
    # claims take every lane and count exactly.
    await queue.configure("default", concurrency=40)
    await queue.enqueue_many("t", [{}] * 200)
    peers = [await asyncpg.connect(dsn) for _ in range(5)]
    try:
        open_ = [peer.transaction() for peer in peers[:4]]
        for i, tx in enumerate(open_):
            await tx.start()
            assert len(await claim(peers[i], queue, ["default"], 12, f"w{i}")) == 5
        fifth = asyncio.ensure_future(claim(peers[4], queue, ["default"], 12, "w4"))
        await asyncio.sleep(0.3)
        assert not fifth.done()  # every lane is held
        for tx in open_:
            await tx.commit()
        assert len(await fifth) == 5
    finally:
        for peer in peers:
            await peer.close()
    assert len(await claim(conn, queue, ["default"], 100)) == 15  # exactly up to 40
    assert await claim(conn, queue, ["default"], 100) == []
