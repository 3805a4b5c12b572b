"""A deterministic guard on the worker's Python work per job: the function calls of a
burst drain (benchmarks/calls.py), against a ceiling a little above today's count.

A feature that adds a call per job moves the count by 1; the machine's speed or load
does not move it (runs agree within 0.5). When a change lowers the count, lower the
ceiling with it; when a change must raise it, say why in the commit.
"""

from __future__ import annotations

from benchmarks.calls import count_calls

JOBS = 5_000
# 55.3-56.1 calls per job here (fixed costs of the worker's start and stop included).
CEILING = 58.0


async def test_a_burst_drain_stays_under_its_calls_per_job(dsn: str) -> None:
    count = await count_calls(dsn, JOBS)
    assert count.per_job <= CEILING, (
        f"{count.per_job:.2f} calls per job, over the ceiling of {CEILING}: something "
        "now runs per job; profile with `python -m benchmarks.calls` and remove it"
    )
