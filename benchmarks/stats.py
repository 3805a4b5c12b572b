"""Medians, rates and a bounded-memory latency histogram (HdrHistogram, microseconds)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 120_000_000  # two minutes
SIGNIFICANT_DIGITS = 3


class LatencyHistogram:
    """Records latencies in microseconds; percentiles in milliseconds; ~40 KiB whatever N."""

    def __init__(self) -> None:
        self.hist = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
        self.negative = 0  # handler started before the producer saw its commit return

    def record_seconds(self, seconds: float) -> None:
        if seconds < 0:
            self.negative += 1
            seconds = 0.0
        us = min(HIGHEST_US, max(LOWEST_US, int(seconds * 1_000_000)))
        self.hist.record_value(us)

    @property
    def count(self) -> int:
        return int(self.hist.get_total_count())

    def percentile_ms(self, pct: float) -> float:
        return float(self.hist.get_value_at_percentile(pct)) / 1000.0

    def max_ms(self) -> float:
        return float(self.hist.get_max_value()) / 1000.0

    def summary_ms(self) -> dict[str, float]:
        if self.count == 0:
            return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan"), "max": 0.0}
        return {
            "p50": self.percentile_ms(50),
            "p95": self.percentile_ms(95),
            "p99": self.percentile_ms(99),
            "max": self.max_ms(),
        }

    def encode(self) -> str:
        return str(self.hist.encode().decode())

    @classmethod
    def decode(cls, encoded: str) -> LatencyHistogram:
        h = cls()
        if encoded:
            h.hist = HdrHistogram.decode(encoded.encode())
        return h

    def merge(self, other: LatencyHistogram) -> None:
        if other.count:
            self.hist.add(other.hist)
        self.negative += other.negative


def median(values: Iterable[float]) -> float:
    data = [v for v in values if v == v]  # drop NaN
    return statistics.median(data) if data else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    if denominator == 0 or denominator != denominator or numerator != numerator:
        return float("nan")
    return numerator / denominator
