"""Producer role of a child process: closed loops (as fast as possible) and fixed rates.

Closed-loop ops: `one` (single enqueue), `many` (batch API), `copy` (COPY path), `raw`
(plain INSERT into the jobs table). `coroutines` callers each loop for `seconds`.
Fixed-rate op `rate`: phases sent by the parent (`run {json}`), open loop: job k is sent
at k / rate whatever the answer time, at most `max_inflight` outstanding; each phase
reports what it achieved (`phase_result`). Op `rate_many` is the same through the batch
API (`benchmarks.batch_producer`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from benchmarks.batch_producer import batch_phases
from benchmarks.clock import SeqClock
from benchmarks.stats import LatencyHistogram
from benchmarks.systems import System, load_system
from benchmarks.systems.base import dumps

Emit = Callable[[dict[str, Any]], None]
Enqueue = Callable[[dict[str, Any]], Awaitable[None]]


class RawInserter:
    """Plain INSERTs through asyncpg into a system's jobs table (trigger cost)."""

    def __init__(self, system: System, connections: int) -> None:
        self.system = system
        self.connections = connections
        self.sql = system.raw_insert_sql()
        self.pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        self.pool = await asyncpg.create_pool(
            self.system.dsn, min_size=self.connections, max_size=self.connections
        )

    async def insert(self, payload: dict[str, Any]) -> None:
        assert self.pool is not None
        await self.pool.execute(self.sql, dumps(payload))

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()


def _operation(system: System, spec: dict[str, Any], raw: RawInserter | None) -> Enqueue:
    op = spec["op"]
    batch = int(spec.get("batch", 1000))
    if op in ("one", "rate", "rate_many"):
        return system.enqueue_one
    if op == "raw":
        assert raw is not None
        return raw.insert
    many = system.enqueue_many if op == "many" else system.enqueue_copy

    async def enqueue_batch(payload: dict[str, Any]) -> None:
        await many([payload] * batch)

    return enqueue_batch


async def closed_loop(
    enqueue: Enqueue, coroutines: int, seconds: float, jobs_per_call: int
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    counts = [0] * coroutines
    start = loop.time()
    end = start + seconds

    async def caller(index: int) -> None:
        payload = {"i": index}
        while loop.time() < end:
            await enqueue(payload)
            counts[index] += jobs_per_call

    await asyncio.gather(*(caller(i) for i in range(coroutines)))
    return {"count": sum(counts), "elapsed": loop.time() - start}


async def rate_phase(
    enqueue: Enqueue,
    phase: dict[str, Any],
    max_inflight: int,
    stop: asyncio.Event,
    clock: SeqClock | None,
) -> dict[str, Any]:
    """Send `rate` x `seconds` jobs on schedule, job k with `seq = seq0 + k`; the commit
    time (right after the enqueue call returns) goes into the shared clock."""
    loop = asyncio.get_running_loop()
    rate = float(phase["rate"])
    total = max(1, int(rate * float(phase["seconds"])))
    seq0 = int(phase.get("seq0", 0))
    errors = 0
    calls = LatencyHistogram()
    slots = asyncio.Semaphore(max_inflight)
    inflight: set[asyncio.Task[None]] = set()

    async def send(k: int) -> None:
        nonlocal errors
        try:
            t0 = time.time()
            await enqueue({"seq": seq0 + k})
            t1 = time.time()
            if clock is not None:
                clock.commit(seq0 + k, t1)
            calls.record_seconds(t1 - t0)
        except Exception:
            errors += 1
        finally:
            slots.release()

    start = loop.time()
    sent = 0
    while sent < total and not stop.is_set():
        due = min(total, int((loop.time() - start) * rate) + 1)
        while sent < due:
            await slots.acquire()
            task = asyncio.create_task(send(sent))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
            sent += 1
        delay = start + sent / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
    send_elapsed = loop.time() - start
    if inflight:
        await asyncio.wait(inflight, timeout=30)
    return {
        "phase": phase.get("phase", 0),
        "rate": rate,
        "sent": sent,
        "errors": errors,
        "send_elapsed": send_elapsed,
        "achieved_rate": sent / send_elapsed if send_elapsed > 0 else 0.0,
        "call_ms": calls.summary_ms(),
    }


async def interactive_phases(
    enqueue: Enqueue, spec: dict[str, Any], control: Any, emit: Emit
) -> dict[str, Any]:
    """Run phases as the parent sends them (`run {json}`), one `phase_result` each."""
    max_inflight = int(spec.get("max_inflight", 64))
    clock = SeqClock.attach(spec.get("clock"))
    while (command := await control.next_command()) is not None:
        if not command.startswith("run "):
            continue
        phase = json.loads(command[4:])
        result = await rate_phase(enqueue, phase, max_inflight, control.stop, clock)
        emit({"event": "phase_result", **result})
    return {}


async def run_producer(spec: dict[str, Any], control: Any, emit: Emit) -> dict[str, Any]:
    system = load_system(spec["system"], spec["dsn"])
    op = spec["op"]
    coroutines = int(spec.get("coroutines", 1))
    connections = int(spec.get("connections", coroutines))
    raw = RawInserter(system, connections) if op == "raw" else None
    if raw is not None:
        await raw.open()
    else:
        await system.open_client(connections)
    try:
        enqueue = _operation(system, spec, raw)
        for _ in range(int(spec.get("warmup", 3))):
            await enqueue({"warmup": 1})
        emit({"event": "ready"})
        await control.go.wait()
        if op == "rate":
            return await interactive_phases(enqueue, spec, control, emit)
        if op == "rate_many":
            return await batch_phases(system.enqueue_many, spec, control, emit)
        jobs_per_call = 1 if op in ("one", "raw") else int(spec.get("batch", 1000))
        return await closed_loop(enqueue, coroutines, float(spec["seconds"]), jobs_per_call)
    finally:
        if raw is not None:
            await raw.close()
        else:
            await system.close_client()
