"""Outage: one account of database trouble for the retrying loops of a process.

The parts of a worker (fetcher, completer, heartbeat, maintenance, listener) retry on
their own; when the database goes away they all fail at once. Logged one by one, an
outage of a few seconds would read as a dozen warnings. Instead the first failure logs
one WARNING (what failed, why, that it retries), the others DEBUG; while any part still
fails a reminder comes at most every 30 s; when the last one works again one INFO says
how long it lasted.
"""

from __future__ import annotations

import logging
import time

# While failures go on, repeat the warning at most this often.
REMIND_EVERY = 30.0


class Outage:
    def __init__(self, target: str = "") -> None:
        self._target = f"{target}: " if target else ""  # e.g. the redacted DSN
        self._failing: dict[str, str] = {}  # loop -> its last error
        self._seen: list[str] = []  # loops that failed during this outage
        self._since = 0.0
        self._reminded = 0.0
        self._first_back: float | None = None  # when the first failing loop worked again
        self._tries = 0

    @property
    def active(self) -> bool:
        return bool(self._failing)

    def failing(
        self, logger: logging.Logger, what: str, reason: str, delay: float, consequence: str
    ) -> None:
        """Loop `what` failed with `reason` and retries in `delay` seconds."""
        now = time.monotonic()
        starts = not self._failing
        self._failing[what] = reason
        if what not in self._seen:
            self._seen.append(what)
        self._tries += 1
        then = f"; {consequence}" if consequence else ""
        if starts:
            self._since = self._reminded = now
            logger.warning(
                "%s%s failed (%s); retrying in %.1f s%s", self._target, what, reason, delay, then
            )
        elif now - self._reminded >= REMIND_EVERY:
            self._reminded = now
            logger.warning(
                "%sstill failing after %.0f s and %d tries (%s); retrying%s",
                self._target,
                now - self._since,
                self._tries,
                "; ".join(f"{name}: {error}" for name, error in self._failing.items()),
                then,
            )
        else:
            logger.debug("%s%s failed again (%s)", self._target, what, reason)

    def working(self, logger: logging.Logger, what: str) -> None:
        """Loop `what` succeeded after failing."""
        now = time.monotonic()
        if self._failing.pop(what, None) is None:
            return
        if self._first_back is None:
            self._first_back = now
        if self._failing:
            logger.debug("%s%s works again", self._target, what)
            return
        lasted, first = now - self._since, self._first_back - self._since
        logger.info(
            "%s%s %s again after %.1f s and %d failed tries%s",
            self._target,
            ", ".join(self._seen),
            "work" if len(self._seen) > 1 else "works",
            lasted,
            self._tries,
            f" (the first after {first:.1f} s)" if lasted - first >= 0.1 else "",
        )
        self._seen, self._tries, self._first_back = [], 0, None
