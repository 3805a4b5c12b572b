"""A serve session: idle workers in their own processes, producers at fixed rates.

Both run until the session ends; the harness sends the producers one phase at a time
(`rate`, `seconds`), waits for them and a settle time, then reads the per-job commit and
start times from the shared `SeqClock`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from benchmarks import processes
from benchmarks.bench import Bench
from benchmarks.clock import SeqClock
from benchmarks.database import checkpoint
from benchmarks.processes import Child, ChildGroup
from benchmarks.stats import LatencyHistogram
from benchmarks.systems import WorkerConfig


@dataclass
class PhaseOutcome:
    offered: float
    achieved: float
    sent: int
    committed: int
    missing: int
    errors: int
    hist: LatencyHistogram
    seconds: float
    call_p99_ms: float

    @property
    def started(self) -> int:
        return self.committed - self.missing

    @property
    def producer_limited(self) -> bool:
        return self.achieved < 0.95 * self.offered


class ServeSession:
    def __init__(
        self,
        bench: Bench,
        name: str,
        config: WorkerConfig,
        capacity: int,
        budget: float,
        worker_processes: int = 1,
        producer_processes: int = 1,
        producer_connections: int = 8,
        max_inflight: int = 32,
        settle: float = 1.0,
        hold_workers: bool = False,
        producer_op: str = "rate",
        producer_extra: dict[str, Any] | None = None,
    ) -> None:
        self.bench = bench
        self.name = name
        self.config = config
        self.capacity = capacity
        self.budget = budget
        self.worker_processes = worker_processes
        self.producer_processes = producer_processes
        self.producer_connections = producer_connections
        self.max_inflight = max_inflight
        self.settle = settle
        # Workers wait (ready: imported, pool open) for `run_young_phase` to start them.
        self.hold_workers = hold_workers
        self.producer_op = producer_op  # `rate` (single enqueues) or `rate_many` (batches)
        self.producer_extra = producer_extra or {}
        self.next_seq = 0
        self.clock: SeqClock | None = None
        self.group = ChildGroup()
        self.workers: list[Child] = []
        self.producers: list[Child] = []

    async def __aenter__(self) -> ServeSession:
        await checkpoint(self.bench.dsn)
        self.clock = SeqClock.create(self.capacity)
        try:
            await self._start()
        except BaseException:
            await self._close()
            raise
        return self

    async def _start(self) -> None:
        assert self.clock is not None
        bench, name = self.bench, self.name
        worker_spec = bench.worker_spec(name, self.config, self.budget, clock=self.clock.spec())
        producer_spec = bench.producer_spec(
            name,
            self.producer_op,
            self.budget,
            clock=self.clock.spec(),
            connections=self.producer_connections,
            max_inflight=self.max_inflight,
            **self.producer_extra,
        )
        self.workers, self.producers = await asyncio.gather(
            self.group.start_ready(f"{name}-worker", worker_spec, self.worker_processes),
            self.group.start_ready(f"{name}-producer", producer_spec, self.producer_processes),
        )
        processes.go(self.producers)
        if self.hold_workers:
            return
        processes.go(self.workers)
        await asyncio.sleep(1.0)  # LISTEN connections up, warm-up jobs done

    async def run_phase(self, rate: float, seconds: float) -> PhaseOutcome:
        assert self.clock is not None
        lo = self._send_phase(rate, seconds)
        return await self._phase_outcome(rate, seconds, lo)

    async def run_young_phase(
        self, rate: float, seconds: float, split: float
    ) -> tuple[PhaseOutcome, PhaseOutcome]:
        """Start the held workers and the phase at the same instant: the workers are born
        into the stream. Outcomes of the jobs committed in the workers' first `split`
        seconds, and of those committed after."""
        assert self.clock is not None and self.hold_workers
        t_go = time.time()
        processes.go(self.workers)
        lo = self._send_phase(rate, seconds)
        whole = await self._phase_outcome(rate, seconds, lo)
        edges = [t_go, t_go + split, t_go + seconds + 60]
        first, rest = (
            replace(whole, hist=hist, committed=committed, missing=missing)
            for hist, committed, missing in self.clock.latencies_by_commit(lo, self.next_seq, edges)
        )
        return first, rest

    def _send_phase(self, rate: float, seconds: float) -> int:
        """Send each producer its share of a phase; the phase's first sequence number."""
        share = rate / len(self.producers)
        per_producer = max(1, int(share * seconds))
        lo = self.next_seq
        for i, producer in enumerate(self.producers):
            phase = {"rate": share, "seconds": seconds, "seq0": lo + i * per_producer}
            producer.send("run " + json.dumps(phase))
        self.next_seq = lo + per_producer * len(self.producers)
        return lo

    async def _phase_outcome(self, rate: float, seconds: float, lo: int) -> PhaseOutcome:
        assert self.clock is not None
        done = await asyncio.gather(
            *(p.expect("phase_result", seconds + 60) for p in self.producers)
        )
        await asyncio.sleep(self.settle)
        hist, committed, missing = self.clock.latencies(lo, self.next_seq)
        return PhaseOutcome(
            offered=rate,
            achieved=sum(d["achieved_rate"] for d in done),
            sent=sum(d["sent"] for d in done),
            committed=committed,
            missing=missing,
            errors=sum(d["errors"] for d in done),
            hist=hist,
            seconds=max(d["send_elapsed"] for d in done),
            call_p99_ms=max(d["call_ms"]["p99"] for d in done),
        )

    async def _close(self) -> None:
        await self.group.stop_all()
        if self.clock is not None:
            self.clock.unlink()
            self.clock = None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self._close())
