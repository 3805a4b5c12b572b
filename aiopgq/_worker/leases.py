"""Leases and the fence: a worker that cannot renew its leases stops those handlers
before the leases run out, so a rescued copy of a job never runs beside the stale one.

A job's lease starts when the claim that took it is sent (the server stamps
heartbeat_at = now() after that), and each successful heartbeat renews the leases of
the jobs it names from the moment it was sent. The rescuer, on the server's clock,
takes a job back once heartbeat_at is `visibility_timeout` old; every instant on this
side is no later than the server's, so a handler cancelled at lease start +
visibility_timeout - margin is cancelled at least `margin` before any rescue.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping

import anyio

from .._models import Job

logger = logging.getLogger("aiopgq.worker")


class Leases:
    """When the leases of this worker's jobs were last known to be renewed: per claim
    and per heartbeat, never per job."""

    def __init__(self) -> None:
        # Before any heartbeat: the worker's start, earlier than any lease it will hold.
        self.renewed_at = time.monotonic()  # when the last successful heartbeat was sent
        self._covered: frozenset[int] = frozenset()  # the jobs it renewed
        # The jobs it named but did not renew: the database no longer has them running
        # on this worker (rescued, cancelled, changed by hand): their leases are gone.
        self._lost: frozenset[int] = frozenset()
        # The jobs it named and neither renewed nor found lost (a heartbeat that skips
        # rows locked by a write in progress): their leases start where they did.
        self._kept: dict[int, float] = {}
        # (sent, returned) of the claims that returned after it was sent, oldest first:
        # it did not name their jobs, whose leases start no sooner than the first `sent`.
        self._claims: list[tuple[float, float]] = []

    def claimed(self, sent_at: float) -> None:
        """A claim sent at `sent_at` returned jobs (called once per non-empty batch)."""
        self._claims.append((sent_at, time.monotonic()))
        if len(self._claims) > 100_000:  # heartbeats keep failing: one entry for them all
            self._claims = [(self._claims[0][0], self._claims[-1][1])]

    def renewed(
        self,
        sent_at: float,
        sent: Collection[int],
        renewed: Collection[int],
        lost: Collection[int],
    ) -> None:
        """A heartbeat sent at `sent_at` named `sent` (every job held then, so the jobs of
        every claim that had returned by then), renewed the leases of `renewed` and found
        `lost` no longer ours. With nothing held, the heartbeat calls it with none: the
        claims so far no longer matter (else, after an idle minute, a new job would count
        from the last claim before it)."""
        if sent_at <= self.renewed_at:
            return
        covered, gone = frozenset(renewed), frozenset(lost)
        kept = {i: self.start(i) for i in sent if i not in covered and i not in gone}
        self.renewed_at, self._covered, self._lost, self._kept = sent_at, covered, gone, kept
        if self._claims:
            self._claims = [claim for claim in self._claims if claim[1] > sent_at]

    def earliest_start(self, running: Collection[int]) -> float:
        """No lease of the `running` jobs started before this (-inf: one is lost)."""
        if self._lost and not self._lost.isdisjoint(running):
            return -math.inf
        earliest = min(self.renewed_at, self._claims[0][0]) if self._claims else self.renewed_at
        return min(earliest, *self._kept.values()) if self._kept else earliest

    def start(self, job_id: int) -> float:
        """The job's lease start as this worker knows it (no later than the server's);
        -inf when the last heartbeat found it no longer ours."""
        if job_id in self._covered:
            return self.renewed_at
        if job_id in self._lost:
            return -math.inf
        kept = self._kept.get(job_id) if self._kept else None
        if kept is not None:
            return kept
        # Claimed after that heartbeat was sent: by the first claim since, or a later one.
        return self._claims[0][0] if self._claims else self.renewed_at


def fence_margin(visibility_timeout: float, heartbeat_interval: float) -> float:
    """How long before its lease runs out a handler that cannot renew it is cancelled."""
    return min(heartbeat_interval, visibility_timeout / 4)


async def run_fence(
    leases: Leases,
    running: Mapping[int, Job],
    fence: Callable[[int, str], None],
    visibility_timeout: float,
    heartbeat_interval: float,
) -> None:
    """Cancel (through `fence`) every running job whose lease is fence_margin() from
    running out without a renewal; forever, cancel to stop. Idle while heartbeats
    succeed: it wakes once per margin and compares two numbers."""
    margin = fence_margin(visibility_timeout, heartbeat_interval)
    limit = visibility_timeout - margin
    while True:
        now = time.monotonic()
        deadline = leases.earliest_start(running.keys()) + limit
        if not running or now < deadline:
            await anyio.sleep(min(deadline - now, margin) if running else margin)
            continue
        for job_id in list(running):
            start = leases.start(job_id)
            if now >= start + limit:
                fence(job_id, _reason(now - start, visibility_timeout))
        await anyio.sleep(margin / 8)


def _reason(unrenewed: float, visibility_timeout: float) -> str:
    if math.isinf(unrenewed):
        return (
            "lease lost: the database no longer has the job running on this worker (its "
            "lease was rescued, or the job was cancelled or changed), so the worker stopped it"
        )
    return (
        f"lease lost: the worker could not renew it for {unrenewed:.1f} s (visibility "
        f"timeout {visibility_timeout:g} s), so it stopped the job before another worker "
        "could rescue it"
    )
