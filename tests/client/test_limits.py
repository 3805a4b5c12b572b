"""Queue limits through the public API, with workers in this process."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Mapping

import asyncpg
import pytest

from aiopgq import ConfigurationError, Job, Observer, Queue, QueueSettings

from ..support.helpers import eventually
from ..support.spans import peak_overlap, violations


async def test_configure_keeps_what_it_is_not_given_and_none_removes(queue: Queue) -> None:
    assert await queue.queue_settings("exports") == QueueSettings("exports")
    assert not (await queue.queue_settings("exports")).limited
    first = await queue.configure("exports", concurrency=3, rate=50.0, burst=10)
    assert first == QueueSettings("exports", concurrency=3, rate=50.0, burst=10)
    second = await queue.configure("exports", key_concurrency=2)
    assert second == QueueSettings("exports", 3, 50.0, 10, 2)
    third = await queue.configure("exports", rate=None, burst=None, concurrency=None)
    assert third == QueueSettings("exports", key_concurrency=2)
    assert third.limited
    assert await queue.queue_settings("exports") == third
    await queue.set_notify("exports", False)  # the other setting of the row is kept
    assert await queue.queue_settings("exports") == third


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("concurrency", 0, "concurrency must be an int >= 1, or None"),
        ("concurrency", 2.5, "concurrency must be an int >= 1"),
        ("concurrency", True, "concurrency must be an int >= 1"),
        ("key_concurrency", -1, "key_concurrency must be an int >= 1"),
        ("burst", 0, "burst must be an int >= 1"),
        ("burst", 2**40, "burst must fit in 32 bits"),
        ("rate", 0, "rate must be > 0"),
        ("rate", float("inf"), "rate must be > 0"),
        ("rate", "50", "rate must be a number of jobs per second"),
    ],
)
async def test_configure_refuses_bad_values_naming_them(
    queue: Queue, option: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        await queue.configure("exports", **{option: value})  # type: ignore[arg-type]
    assert await queue.queue_settings("exports") == QueueSettings("exports")


async def test_enqueue_refuses_a_bad_concurrency_key(queue: Queue) -> None:
    for key in ("", "x" * 201, "a\x00b", 42):
        with pytest.raises(ValueError, match="concurrency_key must be a non-empty string"):
            await queue.enqueue("t", {}, concurrency_key=key)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="concurrency_key"):
            await queue.enqueue_many("t", [{}], concurrency_key=key)  # type: ignore[arg-type]
    assert await queue.status() == []


async def test_every_enqueue_path_stores_the_key(queue: Queue, conn: asyncpg.Connection) -> None:
    @queue.task(name="k")
    async def k(n: int) -> None:
        pass

    await k.enqueue(n=1, concurrency_key="a")
    await k.enqueue_many([{"n": 2}, {"n": 3}], concurrency_key="b")
    await k.copy_many([{"n": 4}], concurrency_key="c")
    await queue.enqueue("k", {"n": 5}, concurrency_key="d", idempotency_key="i")
    await k.enqueue(n=6)
    rows = await conn.fetch(
        f"SELECT payload->>'n' AS n, concurrency_key FROM \"{queue.schema}\".jobs ORDER BY 1"
    )
    assert [(r["n"], r["concurrency_key"]) for r in rows] == [
        ("1", "a"),
        ("2", "b"),
        ("3", "b"),
        ("4", "c"),
        ("5", "d"),
        ("6", None),
    ]


def recorder(queue: Queue, name: str, seconds: float) -> list[tuple[float, float, str]]:
    """Register task `name`, which sleeps and records (start, end, key) of each run."""
    spans: list[tuple[float, float, str]] = []

    @queue.task(name=name)
    async def run(key: str = "") -> None:
        start = time.monotonic()
        await asyncio.sleep(seconds)
        spans.append((start, time.monotonic(), key))

    return spans


async def test_queue_concurrency_holds_across_workers(queue: Queue) -> None:
    spans = recorder(queue, "slow", 0.01)
    await queue.configure("default", concurrency=4)
    await queue.enqueue_many("slow", [{}] * 300)
    workers = [queue.worker(concurrency=10, poll_interval=0.1) for _ in range(3)]
    await asyncio.gather(*(w.run(burst=True) for w in workers))
    assert len(spans) == 300
    assert peak_overlap((s, e) for s, e, _ in spans) == 4  # reached, never passed


async def test_per_key_limit_holds_and_keys_run_side_by_side(queue: Queue) -> None:
    spans = recorder(queue, "slow", 0.01)
    await queue.configure("default", key_concurrency=2)
    for key in "abcdef":
        await queue.enqueue_many("slow", [{"key": key}] * 40, concurrency_key=key)
    workers = [queue.worker(concurrency=20, poll_interval=0.1) for _ in range(2)]
    await asyncio.gather(*(w.run(burst=True) for w in workers))
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for start, end, key in spans:
        by_key[key].append((start, end))
    assert {key: len(runs) for key, runs in by_key.items()} == dict.fromkeys("abcdef", 40)
    assert {key: peak_overlap(runs) for key, runs in by_key.items()} == dict.fromkeys("abcdef", 2)
    assert peak_overlap((s, e) for s, e, _ in spans) > 6  # the keys ran side by side


async def test_rate_limit_spaces_the_starts_and_a_burst_worker_waits_for_them(
    queue: Queue,
) -> None:
    spans = recorder(queue, "quick", 0.0)
    await queue.configure("default", rate=40.0, burst=5)
    await queue.enqueue_many("quick", [{}] * 45)
    started = time.monotonic()
    await queue.worker(concurrency=20, poll_interval=5).run(burst=True)
    elapsed = time.monotonic() - started
    assert len(spans) == 45  # burst mode did not return while the limit held jobs back
    # 5 at once, then 40 more at 40/s: about 1 s, woken by the token times (not the
    # 5 s poll interval).
    assert 0.8 < elapsed < 4, elapsed
    starts = sorted(s for s, _, _ in spans)
    for i, t0 in enumerate(starts):
        in_window = sum(1 for t in starts[i:] if t < t0 + 0.5)
        assert in_window <= 5 + 40 * 0.6, (i, in_window)


async def test_limits_set_at_run_time_apply_within_a_poll_interval(queue: Queue) -> None:
    # Unlimited while a backlog runs; then configure(concurrency=2). The first worker
    # listens but polls every 30 s: only configure()'s NOTIFY can tell it in time. The
    # second does not listen: it learns at its next read of the queues' settings (every
    # half poll interval). After one poll interval no job starts past the limit.
    poll = 0.5
    spans = recorder(queue, "slow", 0.05)
    await queue.enqueue_many("slow", [{}] * 400)
    workers = [
        queue.worker(concurrency=10, poll_interval=30),
        queue.worker(concurrency=10, poll_interval=poll, listen=False),
    ]
    async with workers[0], workers[1]:
        await eventually(lambda: len(spans) >= 40)
        assert peak_overlap((s, e) for s, e, _ in spans) > 2
        limited_at = time.monotonic()
        await queue.configure("default", concurrency=2)
        await eventually(lambda: sum(1 for s, _, _ in spans if s > limited_at + poll) >= 20)
        late = [(s, e) for s, e, _ in spans if s > limited_at + poll]
        # Jobs started before may still run; none started over the limit since (each
        # later start adds to the count only if it started over the limit).
        earlier = [(s, e) for s, e, _ in spans if s <= limited_at + poll]
        assert violations(earlier + late, 2) == violations(earlier, 2)
        lifted_at = time.monotonic()
        await queue.configure("default", concurrency=None)
        await eventually(
            lambda: peak_overlap((s, e) for s, e, _ in spans if s > lifted_at + poll) > 2
        )


async def test_a_paused_queue_keeps_its_limits(queue: Queue) -> None:
    spans = recorder(queue, "slow", 0.01)
    await queue.configure("default", concurrency=2)
    await queue.pause("default")
    await queue.enqueue_many("slow", [{}] * 20)
    async with queue.worker(concurrency=10, poll_interval=0.2):
        await asyncio.sleep(0.5)
        assert spans == []  # paused
        await queue.resume("default")
        await eventually(lambda: len(spans) == 20)
    assert peak_overlap((s, e) for s, e, _ in spans) == 2


async def test_keys_take_turns_so_small_keys_finish_long_before_a_big_backlog(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # Fairness: one key with 100,000 pending jobs, 25 keys with 100
    # each, enqueued after it. Claims take turns over the keys (each key's first job
    # before any key's second), so the small keys are done while the big key has
    # run a small part of its backlog.
    done: dict[str, int] = defaultdict(int)
    small_done = asyncio.Event()

    @queue.task(name="tenant")
    async def tenant(key: str) -> None:
        await asyncio.sleep(0.002)
        done[key] += 1
        if len(done) == 26 and all(n == 100 for k, n in done.items() if k != "big"):
            small_done.set()

    await queue.copy_many("tenant", [{"key": "big"}] * 100_000, concurrency_key="big")
    for i in range(25):
        key = f"small{i}"
        await queue.enqueue_many("tenant", [{"key": key}] * 100, concurrency_key=key)
    await conn.execute(f'ANALYZE "{queue.schema}".jobs')
    await queue.configure("default", key_concurrency=5)
    workers = [queue.worker(concurrency=50) for _ in range(2)]
    async with workers[0], workers[1]:
        await asyncio.wait_for(small_done.wait(), 120)
    assert done["big"] < 10_000, done["big"]  # under a tenth of the big backlog


async def test_a_worker_claims_its_limited_and_plain_queues(queue: Queue) -> None:
    spans = recorder(queue, "slow", 0.01)
    await queue.configure("limited", concurrency=2)
    await queue.enqueue_many("slow", [{"key": "limited"}] * 30, queue="limited")
    await queue.enqueue_many("slow", [{"key": "plain"}] * 100, queue="plain")
    await queue.worker(queues=["limited", "plain"], concurrency=20).run(burst=True)
    limited = [(s, e) for s, e, key in spans if key == "limited"]
    plain = [(s, e) for s, e, key in spans if key == "plain"]
    assert (len(limited), len(plain)) == (30, 100)
    assert peak_overlap(limited) == 2
    assert peak_overlap(plain) > 2


async def test_hold_transaction_workers_respect_the_limit(queue: Queue) -> None:
    spans = recorder(queue, "slow", 0.01)
    await queue.configure("default", concurrency=3)
    await queue.enqueue_many("slow", [{}] * 60)
    workers = [
        queue.worker(concurrency=10, poll_interval=0.1, hold_transaction=True) for _ in range(2)
    ]
    await asyncio.gather(*(w.run(burst=True) for w in workers))
    assert len(spans) == 60
    assert peak_overlap((s, e) for s, e, _ in spans) <= 3


async def test_jobs_without_a_key_in_a_key_limited_queue_still_run(queue: Queue) -> None:
    spans = recorder(queue, "slow", 0.0)
    await queue.configure("default", key_concurrency=1)
    await queue.enqueue_many("slow", [{"key": "a"}] * 5, concurrency_key="a")
    await queue.enqueue_many("slow", [{}] * 5)
    await queue.worker(concurrency=10, poll_interval=0.1).run(burst=True)
    assert sorted(key for _, _, key in spans) == [""] * 5 + ["a"] * 5


class _Carried:
    @property
    def trace_context(self) -> Mapping[str, str]:
        return {"traceparent": "00-limits"}

    def ended(self, job_ids: object, error: object) -> None:
        pass


class _Carrier(Observer):
    reads_trace_context = True  # workers claim with a tenth column

    def __init__(self) -> None:
        self.started: list[Mapping[str, str] | None] = []

    def enqueue_started(self, task: str, queue: str, count: int) -> _Carried:
        return _Carried()

    def job_started(self, job: Job, trace_context: Mapping[str, str] | None) -> None:
        self.started.append(trace_context)


async def test_traced_workers_get_the_trace_context_of_limited_and_keyed_jobs(
    dsn: str, schema: str
) -> None:
    carrier = _Carrier()
    queue = Queue(dsn, schema=schema, observers=[carrier])
    await queue.migrate()

    @queue.task(name="traced")
    async def traced() -> None:
        pass

    async with queue:
        await queue.configure("default", concurrency=2, key_concurrency=1)
        await queue.enqueue("traced", {}, concurrency_key="a")
        await queue.enqueue_many("traced", [{}, {}], concurrency_key="b")
        await queue.copy_many("traced", [{}], concurrency_key="c")
        await queue.enqueue("traced", {})
        await queue.worker(poll_interval=0.1).run(burst=True)
    assert carrier.started == [{"traceparent": "00-limits"}] * 5


async def test_unique_jobs_keep_their_concurrency_key(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    first = await queue.enqueue("u", {"n": 1}, idempotency_key="k1", concurrency_key="tenant")
    again = await queue.enqueue("u", {"n": 1}, idempotency_key="k1", concurrency_key="tenant")
    assert again.id == first.id
    more = await queue.enqueue_many(
        "u", [{"n": 2}, {"n": 3}], idempotency_keys=["k2", "k3"], concurrency_key="other"
    )
    rows = await conn.fetch(f'SELECT id, concurrency_key FROM "{queue.schema}".jobs ORDER BY id')
    assert [(r["id"], r["concurrency_key"]) for r in rows] == [
        (first.id, "tenant"),
        (more[0].id, "other"),
        (more[1].id, "other"),
    ]
