"""Fixed rates through the batch API: producer op `rate_many` (the `ramp` workload).

One process reaches rates a single-enqueue loop cannot: every 1/`batch_hz` s it sends
the jobs due since the last batch in one `enqueue_many` call, open loop (a batch is due
at its time whatever the answer time of the previous ones, at most `max_inflight`
outstanding). Each job carries its sequence number; the commit time of every job of a
batch is the moment its call returned.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.clock import SeqClock
from benchmarks.stats import LatencyHistogram

EnqueueMany = Callable[[list[dict[str, Any]]], Awaitable[None]]
Emit = Callable[[dict[str, Any]], None]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def batch_rate_phase(
    enqueue_many: EnqueueMany,
    phase: dict[str, Any],
    batch_hz: float,
    max_inflight: int,
    stop: asyncio.Event,
    clock: SeqClock | None,
) -> dict[str, Any]:
    """Send `rate` x `seconds` jobs (seq from `seq0`) in batches `batch_hz` times a second."""
    loop = asyncio.get_running_loop()
    rate = float(phase["rate"])
    total = max(1, int(rate * float(phase["seconds"])))
    seq0 = int(phase.get("seq0", 0))
    errors = 0
    calls = LatencyHistogram()
    slots = asyncio.Semaphore(max_inflight)
    inflight: set[asyncio.Task[None]] = set()
    batches = 0

    async def send(lo: int, hi: int) -> None:
        nonlocal errors
        try:
            t0 = time.time()
            await enqueue_many([{"seq": seq0 + k} for k in range(lo, hi)])
            t1 = time.time()
            if clock is not None:
                for k in range(lo, hi):
                    clock.commit(seq0 + k, t1)
            calls.record_seconds(t1 - t0)
        except Exception:
            errors += hi - lo
        finally:
            slots.release()

    cpu0 = _cpu()
    start = loop.time()
    sent = ticks = 0
    tick = 1.0 / batch_hz
    while sent < total and not stop.is_set():
        due = min(total, int((loop.time() - start) * rate) + 1)
        if due > sent:
            await slots.acquire()
            task = asyncio.create_task(send(sent, due))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
            batches += 1
            sent = due
        ticks += 1
        await asyncio.sleep(max(0.0, start + ticks * tick - loop.time()))
    send_elapsed = loop.time() - start
    if inflight:
        await asyncio.wait(inflight, timeout=30)
    return {
        "phase": phase.get("phase", 0),
        "rate": rate,
        "sent": sent,
        "batches": batches,
        "errors": errors,
        "send_elapsed": send_elapsed,
        "achieved_rate": sent / send_elapsed if send_elapsed > 0 else 0.0,
        "call_ms": calls.summary_ms(),
        "cpu_s": _cpu() - cpu0,
    }


async def batch_phases(
    enqueue_many: EnqueueMany, spec: dict[str, Any], control: Any, emit: Emit
) -> dict[str, Any]:
    """Run phases as the parent sends them (`run {json}`), one `phase_result` each."""
    batch_hz = float(spec.get("batch_hz", 100))
    max_inflight = int(spec.get("max_inflight", 4))
    clock = SeqClock.attach(spec.get("clock"))
    while (command := await control.next_command()) is not None:
        if not command.startswith("run "):
            continue
        phase = json.loads(command[4:])
        result = await batch_rate_phase(
            enqueue_many, phase, batch_hz, max_inflight, control.stop, clock
        )
        emit({"event": "phase_result", **result})
    return {}
