"""Handler run spans and how many overlapped at worst (the limits' checks)."""

from __future__ import annotations

from collections.abc import Iterable


def _events(spans: Iterable[tuple[float, float]]) -> list[tuple[float, int]]:
    """Starts (+1) and ends (-1) in time order; an end at t comes before a start at t."""
    listed = list(spans)
    return sorted([(start, 1) for start, _ in listed] + [(end, -1) for _, end in listed])


def peak_overlap(spans: Iterable[tuple[float, float]]) -> int:
    """The most spans (start, end) open at one instant."""
    open_now = peak = 0
    for _, step in _events(spans):
        open_now += step
        peak = max(peak, open_now)
    return peak


def violations(spans: Iterable[tuple[float, float]], limit: int) -> int:
    """How many spans started while `limit` others were already open."""
    open_now = over = 0
    for _, step in _events(spans):
        open_now += step
        if step > 0 and open_now > limit:
            over += 1
    return over
