"""A deterministic guard on the worker's Python work per job: the function calls of a
burst drain (benchmarks/calls.py), against a ceiling a little above today's count; and
on its server work: the statements that drain sends per 1,000 jobs.

A feature that adds a call per job moves the count by 1. A quiet machine's runs agree
within 0.5; a loaded one adds calls (more event-loop wake-ups as replies arrive in
pieces, more timer ticks over a longer drain: 58.2 was seen with the test set running in
three processes beside other work) and never removes any, so a count over the ceiling is
measured again, up to three times, and the lowest counts. When a change lowers the
count, lower the ceiling with it; when a change must raise it, say why in the commit.
"""

from __future__ import annotations

import sys

from benchmarks.calls import count_calls

JOBS = 5_000
# 15.8 calls per job here on Python 3.11 (fixed costs of the worker's start and stop
# included): the dispatcher's plain lane runs each handler's first step with no
# coroutine of ours around it, makes no Job unless something asks for one, and hands
# a batch's `done`s to the completer at once (_worker/plain_lane.py); 33.5 before
# that, with each job's first step inside the dispatcher's call (_worker/
# job_tasks.py); 42.9 before that, 44.9 before each Task was made without
# loop.create_task's wrapper, 48.5 before the results went as one JSON array
# (_db/arrays.py), 55.3-56.1 before ids and attempts went as array literals. Python
# 3.12 and 3.13 take the plain lane too: 15.3-15.5 there (32.3-32.6 with asyncio's eager
# tasks before); later Pythons start each job's task eagerly (.ci/run runs this test on
# a 3.12 where it can).
CEILING = 18.0 if sys.version_info < (3, 14) else 35.5
# The statements the drain sends, per 1,000 jobs: 13.8 here (50 claims of 100 jobs, the
# start's statement, one maintenance pass, the stop). What a slow or loaded machine may
# add is timed background work (a pause refresh each second, a heartbeat each 5 s):
# the ceiling leaves room for 30 such statements; a statement more per claim adds 50.
STATEMENTS_CEILING = 20.0


async def test_a_burst_drain_stays_under_its_calls_per_job(dsn: str) -> None:
    counts = []
    for _ in range(3):
        counts.append(await count_calls(dsn, JOBS))
        if counts[-1].per_job <= CEILING and counts[-1].statements_per_1000 <= STATEMENTS_CEILING:
            break
    calls = [c.per_job for c in counts]
    assert min(calls) <= CEILING, (
        f"{', '.join(f'{c:.2f}' for c in calls)} calls per job, over the ceiling of "
        f"{CEILING}: something now runs per job; profile with `python -m benchmarks.calls` "
        "and remove it"
    )
    statements = [c.statements_per_1000 for c in counts]
    assert min(statements) <= STATEMENTS_CEILING, (
        f"{', '.join(f'{s:.1f}' for s in statements)} statements per 1000 jobs, over the "
        f"ceiling of {STATEMENTS_CEILING}: the worker now sends more per claim or per job "
        "(`python -m benchmarks.calls` counts them)"
    )
