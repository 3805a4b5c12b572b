"""Per-job commit and start times shared by producers, workers and the harness.

A sparse file in /dev/shm holds two float64 arrays indexed by the job's sequence number
(carried in its payload): the producer writes the commit time right after its enqueue
call returns, the worker writes the handler start time. The harness reads both and
records start - commit into an HdrHistogram. Memory is bounded by the number of jobs a
session can send, and only the pages touched are allocated.
"""

from __future__ import annotations

import bisect
import mmap
import os
import tempfile
from typing import Any

from benchmarks.stats import LatencyHistogram

_DOUBLE = 8


class SeqClock:
    def __init__(self, path: str, capacity: int, create: bool = False) -> None:
        self.path = path
        self.capacity = capacity
        size = 2 * capacity * _DOUBLE
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._view = memoryview(self._map).cast("d")

    @classmethod
    def create(cls, capacity: int) -> SeqClock:
        directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        fd, path = tempfile.mkstemp(prefix="aiopgq-bench-clock-", dir=directory)
        os.close(fd)
        os.unlink(path)
        return cls(path, capacity, create=True)

    @classmethod
    def attach(cls, spec: dict[str, Any] | None) -> SeqClock | None:
        return cls(spec["path"], int(spec["capacity"])) if spec else None

    def spec(self) -> dict[str, Any]:
        return {"path": self.path, "capacity": self.capacity}

    def commit(self, seq: int, t: float) -> None:
        if 0 <= seq < self.capacity:
            self._view[seq] = t

    def start(self, seq: int, t: float) -> None:
        """First start only: a job that runs twice keeps its first start time."""
        if 0 <= seq < self.capacity and self._view[self.capacity + seq] == 0.0:
            self._view[self.capacity + seq] = t

    def latencies(self, lo: int, hi: int) -> tuple[LatencyHistogram, int, int]:
        """(histogram of start - commit, committed jobs, committed jobs not started)."""
        hist = LatencyHistogram()
        committed = missing = 0
        for seq in range(max(0, lo), min(hi, self.capacity)):
            t_commit = self._view[seq]
            if t_commit == 0.0:
                continue
            committed += 1
            t_start = self._view[self.capacity + seq]
            if t_start == 0.0:
                missing += 1
            else:
                hist.record_seconds(t_start - t_commit)
        return hist, committed, missing

    def latencies_by_commit(
        self, lo: int, hi: int, edges: list[float]
    ) -> list[tuple[LatencyHistogram, int, int]]:
        """`latencies` per window of commit time: jobs committed in [edges[i], edges[i+1])."""
        windows = [(LatencyHistogram(), [0, 0]) for _ in edges[:-1]]
        for seq in range(max(0, lo), min(hi, self.capacity)):
            t_commit = self._view[seq]
            if t_commit == 0.0 or not edges[0] <= t_commit < edges[-1]:
                continue
            hist, counts = windows[bisect.bisect_right(edges, t_commit) - 1]
            counts[0] += 1
            t_start = self._view[self.capacity + seq]
            if t_start == 0.0:
                counts[1] += 1
            else:
                hist.record_seconds(t_start - t_commit)
        return [(hist, committed, missing) for hist, (committed, missing) in windows]

    def close(self) -> None:
        self._view.release()
        self._map.close()

    def unlink(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
