"""`python -m benchmarks [--only drain,latency] [--systems ...] [--rounds 3] [--quick]
[--baseline DIR]`."""

from __future__ import annotations

import asyncio
import importlib
import shutil
import signal
import sys
import time

from benchmarks.bench import Bench, package_versions
from benchmarks.config import BASELINE_SYSTEM, Options, parse_options
from benchmarks.database import create_database, drop_database, server_info
from benchmarks.processes import log_dir
from benchmarks.systems import System, load_system
from benchmarks.trees import git_describe, imports_seen


async def install_systems(opts: Options, dsn: str) -> dict[str, System]:
    systems: dict[str, System] = {}
    for name in opts.systems:
        baseline = opts.baseline if name == BASELINE_SYSTEM else None
        try:
            system = load_system(name, dsn, baseline)
            await system.install()
        except ImportError as exc:
            print(f"skipping {name}: cannot import it ({exc})", file=sys.stderr)
            continue
        systems[name] = system
    if not systems:
        raise SystemExit("no system could be installed")
    return systems


def describe_aiopgq(opts: Options, systems: dict[str, System]) -> str:
    """Which tree each aiopgq system measures (the baseline's as its install child saw it)."""
    lines = []
    if "aiopgq" in systems:
        lines.append(f"aiopgq: {git_describe()}, schema {systems['aiopgq'].schema}")
    base = systems.get(BASELINE_SYSTEM)
    if base is not None and opts.baseline is not None:
        lines.append(
            f"{BASELINE_SYSTEM}: {git_describe(opts.baseline)} ({opts.baseline}), schema "
            f"{base.schema}, aiopgq imported from {getattr(base, 'imported_from', '?')}"
        )
    return "\n".join(lines)


def tree_state(opts: Options) -> list[str]:
    """Commits of the measured trees, to notice one changing during a workload."""
    return [git_describe()] + ([git_describe(opts.baseline)] if opts.baseline else [])


def stop_on_signals() -> None:
    """SIGINT and SIGTERM cancel the run, so every child is stopped and the database dropped
    (also where SIGINT is ignored, as for background jobs of a non-interactive shell)."""
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, main_task.cancel)


async def main_async(opts: Options) -> int:
    stop_on_signals()
    info = await server_info(opts.dsn)
    versions = ", ".join(f"{k} {v}" for k, v in package_versions(opts.baseline).items())
    print(f"{info.short}\nserver: {info.version}\nversions: {versions}", flush=True)
    dsn = await create_database(opts.dsn, opts.database)
    failures = 0
    try:
        systems = await install_systems(opts, dsn)
        bench = Bench(opts, info, dsn, systems)
        print(
            f"database {opts.database}; systems {', '.join(systems)}; "
            f"rounds {opts.rounds}; event loop {opts.loop}; child logs in {log_dir()}\n"
            f"{describe_aiopgq(opts, systems)}\n",
            flush=True,
        )
        for workload in opts.workloads:
            started = time.monotonic()
            tree_before = tree_state(opts)
            module = importlib.import_module(f"benchmarks.workloads.{workload}")
            try:
                results = await module.run(bench)
            except Exception as exc:  # one broken workload must not hide the others
                failures += 1
                print(f"== {workload} FAILED: {type(exc).__name__}: {exc}\n", flush=True)
                continue
            tree_after = tree_state(opts)
            if tree_after != tree_before:
                results.notes.append(
                    f"an aiopgq tree changed during this workload ({', '.join(tree_before)} -> "
                    f"{', '.join(tree_after)}): benchmark fixed checkouts (benchmarks/README.md)"
                )
            bench.finish(results)
            print(f"  ({workload} took {time.monotonic() - started:.0f}s)\n", flush=True)
    finally:
        if not opts.keep_db:
            await drop_database(opts.dsn, opts.database)
    for name, files in imports_seen().items():
        print(f"{name} children imported aiopgq from {', '.join(files)}", flush=True)
    if failures:
        print(f"child process logs kept in {log_dir()}", file=sys.stderr)
    else:
        shutil.rmtree(log_dir(), ignore_errors=True)
    return 1 if failures else 0


def main() -> None:
    opts = parse_options()
    try:
        code = asyncio.run(main_async(opts))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; child processes stopped, benchmark database dropped", file=sys.stderr)
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
