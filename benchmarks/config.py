"""Command-line options of the benchmark suite and the DSN they resolve to."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.trees import check_tree

ALL_WORKLOADS = ("drain", "latency", "enqueue", "steady", "bloat", "cpu", "limits")
OPT_IN_WORKLOADS = ("soak", "ramp")  # long: run only when named in --only
ALL_SYSTEMS = ("aiopgq", "bare", "pgqueuer", "procrastinate")
OPT_IN_SYSTEMS = ("bare-leased",)  # a reference for one question: only when named
BASELINE_SYSTEM = "aiopgq-base"  # aiopgq from the `--baseline` checkout
AIOPGQ_SYSTEMS = ("aiopgq", BASELINE_SYSTEM)
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def resolve_dsn(explicit: str | None) -> str:
    """`--dsn`, else AIOPGQ_DSN, else DATABASE_URL, else the local test server."""
    return explicit or os.environ.get("AIOPGQ_DSN") or os.environ.get("DATABASE_URL") or DEFAULT_DSN


@dataclass
class Options:
    """Everything a workload may read; `--quick` rewrites the defaults to small values."""

    dsn: str = DEFAULT_DSN
    workloads: list[str] = field(default_factory=lambda: list(ALL_WORKLOADS))
    systems: list[str] = field(default_factory=lambda: list(ALL_SYSTEMS))
    rounds: int = 3
    quick: bool = False
    keep_db: bool = False
    database: str = "aiopgq_bench"
    results_dir: Path = RESULTS_DIR
    plots: bool = True
    baseline: Path | None = None  # another checkout of the repo, measured as aiopgq-base
    loop: str = "asyncio"  # every child's event loop: asyncio or uvloop
    # drain / cpu
    jobs: int = 30_000
    workers: int = 4
    concurrency: int = 100
    procrastinate_divisor: int = 5
    pgqueuer_batch: int = 100
    pgqueuer_concurrency: int = 1000
    procrastinate_concurrency: int = 10
    # latency
    latency_rates: list[float] = field(default_factory=lambda: [20.0, 500.0])
    latency_seconds: float = 3.0
    # latency, young worker: a worker started into a steady stream
    young_rate: float = 200.0
    young_seconds: float = 20.0
    young_split: float = 10.0
    young_concurrency: int = 32
    # enqueue
    enqueue_seconds: float = 1.5
    trigger_seconds: float = 1.0
    backlog_jobs: int = 100_000
    # steady
    steady_window: float = 60.0
    steady_workers: int = 2
    steady_step_seconds: float = 3.0
    steady_p99_ms: float = 50.0
    steady_start_rate: float = 200.0
    steady_max_rate: float = 40_000.0
    # ramp
    ramp_rates: list[float] = field(
        default_factory=lambda: [1000.0, 2000.0, 4000.0, 6000.0, 8000.0, 10000.0, 12000.0, 14000.0]
    )
    ramp_step_seconds: float = 30.0
    ramp_p99_ms: float = 20.0
    ramp_batch_hz: float = 100.0
    ramp_past: int = 1
    # bloat
    bloat_done_rows: int = 1_000_000
    bloat_future_rows: int = 100_000
    # cpu
    cpu_jobs: int = 10_000
    sleeping_jobs: int = 10_000
    # soak
    soak_minutes: float = 30.0
    soak_rate: float = 1000.0
    soak_workers: int = 1
    soak_sample: float = 10.0
    soak_retention: float = 60.0
    soak_tracemalloc: int = 0
    soak_trace: str = "workers"  # which processes run under tracemalloc

    def apply_quick(self, explicit: set[str]) -> None:
        """Shrink sizes for a run under ~3 minutes, keeping what the user set explicitly."""
        quick = {
            "rounds": 1,
            "jobs": 10_000,
            "procrastinate_divisor": 10,
            "latency_seconds": 1.5,
            "young_seconds": 12.0,
            "enqueue_seconds": 0.7,
            "trigger_seconds": 1.0,
            "backlog_jobs": 20_000,
            "steady_window": 4.0,
            "steady_step_seconds": 1.5,
            "steady_start_rate": 500.0,
            "ramp_step_seconds": 3.0,
            "bloat_done_rows": 200_000,
            "bloat_future_rows": 20_000,
            "cpu_jobs": 3_000,
            "sleeping_jobs": 2_000,
        }
        for name, value in quick.items():
            if name not in explicit:
                setattr(self, name, value)

    def steady_start_for(self, system: str) -> float:
        """Procrastinate does not hold 200/s here: its rate search starts 4x lower."""
        return self.steady_start_rate / 4 if system == "procrastinate" else self.steady_start_rate

    def jobs_for(self, system: str, jobs: int | None = None) -> int:
        """Procrastinate is ~100x slower: it gets a fraction of the jobs (rates are per s)."""
        n = self.jobs if jobs is None else jobs
        return max(100, n // self.procrastinate_divisor) if system == "procrastinate" else n


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _csv_floats(value: str) -> list[float]:
    return [float(part) for part in _csv(value)]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Side-by-side benchmarks: aiopgq vs a bare asyncpg loop vs PGQueuer "
        "vs Procrastinate, on one PostgreSQL server, interleaved rounds, medians.",
    )
    a = p.add_argument
    a("--dsn", help="server DSN (default: AIOPGQ_DSN, DATABASE_URL, then local test server)")
    a(
        "--only",
        type=_csv,
        dest="workloads",
        help=f"workloads: {','.join(ALL_WORKLOADS)}, and {','.join(OPT_IN_WORKLOADS)} "
        "(long, only when named here)",
    )
    a(
        "--systems",
        type=_csv,
        help=f"systems: {','.join(ALL_SYSTEMS)} (default: all), {','.join(OPT_IN_SYSTEMS)} "
        f"(only when named), and {BASELINE_SYSTEM} with --baseline (then in the default "
        "list too)",
    )
    a(
        "--baseline",
        type=Path,
        metavar="DIR",
        help=f"another checkout of the aiopgq repo (e.g. a git worktree of an older commit): "
        f"system {BASELINE_SYSTEM} runs the same aiopgq benchmark code with aiopgq from DIR, "
        "in its own schema, so tables show before and after in one run",
    )
    a("--rounds", type=int, help="interleaved rounds per workload (default 3)")
    a("--quick", action="store_true", help="small sizes, whole run under ~3 minutes")
    a("--keep-db", action="store_true", help="keep the benchmark database at the end")
    a("--database", help="name of the benchmark database (created and dropped)")
    a("--results-dir", type=Path, help="where JSON and PNG go (default benchmarks/results)")
    a("--no-plots", dest="plots", action="store_false", default=None, help="skip PNG plots")
    a(
        "--loop",
        choices=["asyncio", "uvloop"],
        help="event loop of every worker and producer process, all systems alike "
        "(default asyncio; the aiopgq and PGQueuer CLIs use uvloop when installed)",
    )
    a("--jobs", type=int, help="jobs per drain (default 30000)")
    a("--workers", type=int, help="worker processes for drain (default 4)")
    a("--concurrency", type=int, help="bare batch / aiopgq concurrency per process (100)")
    a("--procrastinate-divisor", type=int, help="procrastinate gets jobs/N (default 5)")
    a("--pgqueuer-batch", type=int, help="PGQueuer dequeue batch size (default 100)")
    a("--pgqueuer-concurrency", type=int, help="PGQueuer max_concurrent_tasks (1000)")
    a("--procrastinate-concurrency", type=int, help="Procrastinate concurrency (default 10)")
    a("--latency-rates", type=_csv_floats, help="jobs/s for latency (default 20,500)")
    a("--latency-seconds", type=float, help="seconds per latency rate (default 3)")
    a("--young-rate", type=float, help="jobs/s a young worker is started into (200; 0: skip)")
    a("--young-seconds", type=float, help="seconds of the young-worker phase (default 20)")
    a("--young-split", type=float, help="the young worker's first window, seconds (10)")
    a("--young-concurrency", type=int, help="the young worker's concurrency (default 32)")
    a("--enqueue-seconds", type=float, help="seconds per enqueue cell (default 1.5)")
    a("--trigger-seconds", type=float, help="seconds per trigger on/off cell (default 1)")
    a("--backlog-jobs", type=int, help="pending rows for the backlog cells (default 100000)")
    a("--steady-window", type=float, help="seconds the best steady rate is held (default 60)")
    a("--steady-workers", type=int, help="worker processes for steady (default 2)")
    a("--steady-step-seconds", type=float, help="seconds per step of the rate search (3)")
    a("--steady-p99-ms", type=float, help="p99 bound for a held rate (default 50 ms)")
    a("--steady-start-rate", type=float, help="first offered rate of the search (200/s)")
    a("--steady-max-rate", type=float, help="search stops here (default 40000/s)")
    a("--ramp-rates", type=_csv_floats, help="offered rates of the ramp, jobs/s (1000,...)")
    a("--ramp-step-seconds", type=float, help="seconds per ramp step (default 30)")
    a("--ramp-p99-ms", type=float, help="latency p99 bound of a held ramp step (20 ms)")
    a("--ramp-batch-hz", type=float, help="ramp producer's enqueue_many calls per s (100)")
    a("--ramp-past", type=int, help="ramp steps run past the first one not held (1)")
    a("--bloat-done-rows", type=int, help="retained done rows (default 1000000)")
    a("--bloat-future-rows", type=int, help="future-dated pending rows (default 100000)")
    a("--cpu-jobs", type=int, help="jobs for the CPU-per-job figure (default 10000)")
    a("--sleeping-jobs", type=int, help="concurrent sleeping jobs for RSS (default 10000)")
    a("--soak-minutes", type=float, help="soak duration (default 30)")
    a("--soak-rate", type=float, help="soak offered rate, jobs/s (default 1000)")
    a("--soak-workers", type=int, help="soak worker processes (default 1)")
    a("--soak-sample", type=float, help="seconds between soak samples (default 10)")
    a("--soak-retention", type=float, help="soak worker's retention, seconds (default 60)")
    a(
        "--soak-tracemalloc",
        type=int,
        metavar="FRAMES",
        help="run soak workers (or --soak-trace producers) under tracemalloc with this "
        "many frames; report the largest growths after warm-up",
    )
    a("--soak-trace", choices=["workers", "producers"], help="what --soak-tracemalloc traces")
    return p


def apply_baseline(opts: Options, systems_given: bool) -> None:
    """Check `--systems` against `--baseline`; without `--systems`, add aiopgq-base after
    aiopgq. The baseline tree is made absolute and must hold an `aiopgq/` package."""
    known = (*ALL_SYSTEMS, *OPT_IN_SYSTEMS, BASELINE_SYSTEM)
    unknown = set(opts.systems) - set(known)
    if unknown:
        raise SystemExit(f"unknown system(s) {sorted(unknown)}; choose from {known}")
    if opts.baseline is None:
        if BASELINE_SYSTEM in opts.systems:
            raise SystemExit(f"{BASELINE_SYSTEM} needs --baseline DIR (a checkout to compare with)")
        return
    opts.baseline = check_tree(opts.baseline)
    if not systems_given and BASELINE_SYSTEM not in opts.systems:
        at = opts.systems.index("aiopgq") + 1 if "aiopgq" in opts.systems else 0
        opts.systems.insert(at, BASELINE_SYSTEM)
    if BASELINE_SYSTEM not in opts.systems:
        raise SystemExit(f"--baseline is given but --systems leaves out {BASELINE_SYSTEM}")


def parse_options(argv: list[str] | None = None) -> Options:
    args = build_parser().parse_args(argv)
    given = {k: v for k, v in vars(args).items() if v is not None}
    opts = Options()
    for name, value in given.items():
        if name != "dsn":
            setattr(opts, name, value)
    if args.quick:
        opts.apply_quick(set(given))
    opts.dsn = resolve_dsn(args.dsn)
    unknown = set(opts.workloads) - set(ALL_WORKLOADS) - set(OPT_IN_WORKLOADS)
    if unknown:
        raise SystemExit(
            f"unknown workload(s) {sorted(unknown)}; choose from {ALL_WORKLOADS + OPT_IN_WORKLOADS}"
        )
    apply_baseline(opts, systems_given="systems" in given)
    if opts.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    return opts
