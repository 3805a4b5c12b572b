"""`python -m benchmarks [--only drain,latency] [--systems ...] [--rounds 3] [--quick]`."""

from __future__ import annotations

import asyncio
import importlib
import shutil
import signal
import sys
import time

from benchmarks.bench import Bench, git_describe, package_versions
from benchmarks.config import Options, parse_options
from benchmarks.database import create_database, drop_database, server_info
from benchmarks.processes import log_dir
from benchmarks.systems import System, load_system


async def install_systems(opts: Options, dsn: str) -> dict[str, System]:
    systems: dict[str, System] = {}
    for name in opts.systems:
        try:
            system = load_system(name, dsn)
            await system.install()
        except ImportError as exc:
            print(f"skipping {name}: cannot import it ({exc})", file=sys.stderr)
            continue
        systems[name] = system
    if not systems:
        raise SystemExit("no system could be installed")
    return systems


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
    versions = ", ".join(f"{k} {v}" for k, v in package_versions().items())
    print(f"{info.short}\nserver: {info.version}\nversions: {versions}", flush=True)
    dsn = await create_database(opts.dsn, opts.database)
    failures = 0
    try:
        systems = await install_systems(opts, dsn)
        bench = Bench(opts, info, dsn, systems)
        print(
            f"database {opts.database}; systems {', '.join(systems)}; "
            f"rounds {opts.rounds}; event loop {opts.loop}; child logs in {log_dir()}\n",
            flush=True,
        )
        for workload in opts.workloads:
            started = time.monotonic()
            tree_before = git_describe()
            module = importlib.import_module(f"benchmarks.workloads.{workload}")
            try:
                results = await module.run(bench)
            except Exception as exc:  # one broken workload must not hide the others
                failures += 1
                print(f"== {workload} FAILED: {type(exc).__name__}: {exc}\n", flush=True)
                continue
            tree_after = git_describe()
            if tree_after != tree_before:
                results.notes.append(
                    f"the aiopgq tree changed during this workload ({tree_before} -> "
                    f"{tree_after}): benchmark a fixed checkout (see benchmarks/README.md)"
                )
            bench.finish(results)
            print(f"  ({workload} took {time.monotonic() - started:.0f}s)\n", flush=True)
    finally:
        if not opts.keep_db:
            await drop_database(opts.dsn, opts.database)
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
