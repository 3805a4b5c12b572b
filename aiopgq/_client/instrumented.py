"""Instrumented: the Queue mixin that keeps the queue's observers (metrics, tracing, yours)."""

from __future__ import annotations

from .._observer import Observer, combine
from .core import QueueCore


class Instrumented(QueueCore):
    @property
    def observer(self) -> Observer | None:
        """The observers as one (None without any): what enqueue and workers call."""
        return self._observer

    @property
    def observers(self) -> list[Observer]:
        """The observers given to the queue, in order."""
        return list(self._observers)

    def add_observer(self, observer: Observer) -> None:
        """Observe this queue's enqueues and its workers' jobs from now on (workers
        started before keep the observers they started with).

        >>> queue.add_observer(aiopgq.metrics.Metrics())
        """
        if not isinstance(observer, Observer):
            raise TypeError(f"observers are aiopgq.Observer instances, not {observer!r}")
        self._observers.append(observer)
        self._observer = combine(self._observers)
