"""Prometheus metrics of aiopgq (the `metrics` extra): jobs counted per queue and task.

>>> queue = Queue(dsn, observers=[aiopgq.metrics.Metrics()])
>>> await queue.worker(metrics_port=9464).run()  # or `aiopgq worker app:queue --metrics-port 9464`

Counters (`aiopgq_jobs_<what>_total`): enqueued, cancelled (counted in the process
that enqueues or cancels), started, succeeded, retried, failed, released (in the
worker). Histograms: `aiopgq_job_run_seconds` (the handler's run) and
`aiopgq_job_start_latency_seconds` (from when the job became runnable, its enqueue
or its run_at or retry time, to its start). Labels: `queue` and `task`, at most
`max_queues` and `max_tasks` distinct values each; later names count as "other".

A job's hook does a few integer additions on plain Python objects (no lock, no
prometheus_client call); the Prometheus families are built when scraped. Counting
happens on the event loop; scraping from another thread (your own exposition server)
may read a histogram's sum and count a few jobs apart.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from ._models import Job
from ._observer import Observer, Outcome

OTHER = "other"
"""The label value of task or queue names past the cap."""

MAX_LABELS = 100
"""How many distinct task or queue names get a label of their own (default caps)."""

RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 300)
_COUNTERS = ("enqueued", "cancelled", "started", "succeeded", "retried", "failed", "released")
_HELP = {
    "enqueued": "Jobs enqueued (counted by the process that enqueued them)",
    "cancelled": "Jobs cancelled with queue.cancel(), pending or running (counted by that process)",
    "started": "Jobs whose run started in this worker",
    "succeeded": "Runs that returned",
    "retried": "Runs that failed with attempts left: the job runs again after its backoff",
    "failed": "Runs that failed for good (last attempt, or a job that cannot run)",
    "released": "Runs given back to pending unfinished (the worker stopped)",
}


class _Series:
    """Everything counted for one (queue, task) label pair."""

    __slots__ = (
        "cancelled",
        "enqueued",
        "failed",
        "released",
        "retried",
        "run",
        "run_sum",
        "started",
        "succeeded",
        "wait",
        "wait_sum",
    )

    def __init__(self, run_buckets: int, wait_buckets: int) -> None:
        self.enqueued = self.cancelled = self.started = self.succeeded = 0
        self.retried = self.failed = self.released = 0
        self.run = [0] * (run_buckets + 1)  # per bucket, not cumulative; the last is +Inf
        self.run_sum = 0.0
        self.wait = [0] * (wait_buckets + 1)
        self.wait_sum = 0.0


class Metrics(Observer):
    """Counts jobs for Prometheus; registers itself in `registry` (default: the
    prometheus_client default registry, which `metrics_port` serves).

    >>> queue = Queue(dsn, observers=[Metrics(max_tasks=50)])
    >>> worker = queue.worker(metrics_port=9464)

    Args:
        registry: where it registers (default: prometheus_client's default registry;
            None: nowhere, for your own exposition through `collect()`).
        max_tasks: how many task names get a label of their own; later ones count as
            "other" (default 100, >= 1).
        max_queues: how many queue names get a label of their own (default 100, >= 1).
        run_buckets: the run-time histogram's bucket bounds, in seconds (default 5 ms to
            1 h).
        latency_buckets: the start-latency histogram's bucket bounds, in seconds (default
            1 ms to 300 s).

    Raises:
        ValueError: `max_tasks` or `max_queues` under 1.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        max_tasks: int = MAX_LABELS,
        max_queues: int = MAX_LABELS,
        run_buckets: Sequence[float] = RUN_BUCKETS,
        latency_buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        if max_tasks < 1 or max_queues < 1:
            raise ValueError("max_tasks and max_queues must be at least 1")
        self.max_tasks = max_tasks
        self.max_queues = max_queues
        self._run_bounds = sorted(float(b) for b in run_buckets)
        self._wait_bounds = sorted(float(b) for b in latency_buckets)
        self._tasks: dict[str, str] = {}  # name -> label, for the first max_tasks names
        self._queues: dict[str, str] = {}
        self._series: dict[tuple[str, str], _Series] = {}
        self._collector = _Collector(self)
        if registry is not None:
            registry.register(self._collector)

    def collect(self) -> Iterator[Metric]:
        """The metric families now (what a scrape of the registry returns).

        Returns:
            The counters and histograms, one family per metric.
        """
        return self._collector.collect()

    # -- hooks ---------------------------------------------------------------------

    def enqueue_started(self, task: str, queue: str, count: int) -> _Enqueue:
        return _Enqueue(self._series_of(queue, task), count)

    def cancelled(self, job_id: int, task: str, queue: str) -> None:
        self._series_of(queue, task).cancelled += 1

    def job_started(self, job: Job, trace_context: Mapping[str, str] | None) -> _Run:
        series = self._series_of(job.queue, job.task)
        series.started += 1
        try:
            wait = max(0.0, time.time() - job.run_at.timestamp())
        except (OverflowError, ValueError, OSError):  # run_at -infinity, written by hand
            wait = 0.0
        series.wait[bisect_left(self._wait_bounds, wait)] += 1
        series.wait_sum += wait
        return _Run(series, self._run_bounds)

    # -- labels --------------------------------------------------------------------

    def _series_of(self, queue: str, task: str) -> _Series:
        key = (
            label(self._queues, queue, self.max_queues),
            label(self._tasks, task, self.max_tasks),
        )
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(len(self._run_bounds), len(self._wait_bounds))
        return series


def label(known: dict[str, str], name: str, cap: int) -> str:
    """The label of `name`: itself for the first `cap` names `known` meets, else OTHER.

    Args:
        known: the names labelled so far, by name (`name` is added while there is room).
        name: a task's or queue's name.
        cap: how many names get a label of their own.

    Returns:
        `name`, or OTHER ("other") once `known` holds `cap` other names.
    """
    label = known.get(name)
    if label is not None:
        return label
    if len(known) >= cap:
        return OTHER  # not remembered: the map stays at `cap` names
    known[name] = name
    return name


class _Enqueue:
    __slots__ = ("_count", "_series")
    trace_context = None

    def __init__(self, series: _Series, count: int) -> None:
        self._series = series
        self._count = count

    def ended(self, job_ids: Sequence[int] | None, error: BaseException | None) -> None:
        if error is None:
            self._series.enqueued += self._count


class _Run:
    __slots__ = ("_bounds", "_series", "_start")

    def __init__(self, series: _Series, bounds: list[float]) -> None:
        self._series = series
        self._bounds = bounds
        self._start = time.perf_counter()

    def ended(self, outcome: Outcome, error: str | None) -> None:
        series = self._series
        if outcome == "released":  # cut short: not a run time
            series.released += 1
            return
        if outcome == "cancelled":  # counted as cancelled by the process that cancelled it
            return
        took = time.perf_counter() - self._start
        series.run[bisect_left(self._bounds, took)] += 1
        series.run_sum += took
        if outcome == "succeeded":
            series.succeeded += 1
        elif outcome == "retried":
            series.retried += 1
        else:
            series.failed += 1


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        series = list(metrics._series.items())  # one C call: safe against the loop's inserts
        labels = ["queue", "task"]
        for name in _COUNTERS:
            family = CounterMetricFamily(f"aiopgq_jobs_{name}", _HELP[name], labels=labels)
            for key, one in series:
                family.add_metric(list(key), getattr(one, name))
            yield family
        yield _histogram(
            "aiopgq_job_run_seconds",
            "How long handlers ran (succeeded, retried and failed runs)",
            series,
            metrics._run_bounds,
            run=True,
        )
        yield _histogram(
            "aiopgq_job_start_latency_seconds",
            "From when a job became runnable (enqueued, or its run_at or retry time) to its start",
            series,
            metrics._wait_bounds,
            run=False,
        )


def _histogram(
    name: str,
    documentation: str,
    series: list[tuple[tuple[str, str], _Series]],
    bounds: list[float],
    *,
    run: bool,
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=["queue", "task"])
    for key, one in series:
        counts, total = (one.run, one.run_sum) if run else (one.wait, one.wait_sum)
        buckets, cumulative = [], 0
        for bound, count in zip([*bounds, float("inf")], counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        family.add_metric(list(key), buckets, total)
    return family
