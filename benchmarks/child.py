"""Entry point of a benchmark child process: `python -m benchmarks.child SPEC_JSON`.

Roles: `worker` (runs one system's worker, reports handler records and CPU),
`producer` (enqueues through one system's client, see `benchmarks.producers`) and
`admin` (a parent-side step that must run with this child's aiopgq: aiopgq-base's
migrate, fixture load and notify switch).
Protocol: prints `@@ {json}` lines (`ready`, `progress`, `result`, `error`); reads
`go` and `stop` lines on stdin; stdin EOF or the spec's deadline mean stop. `ready` also
names the aiopgq package the child imported. With AIOPGQ_BENCH_TREE set, aiopgq is
imported from that checkout (`benchmarks.trees`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import time
import traceback
from typing import Any

from benchmarks.processes import MESSAGE_PREFIX
from benchmarks.trees import import_aiopgq, imported_aiopgq

_PR_SET_PDEATHSIG = 1


def emit(msg: dict[str, Any]) -> None:
    if msg.get("event") == "ready":
        msg = {**msg, "aiopgq": imported_aiopgq()}
    sys.stdout.write(MESSAGE_PREFIX + json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def die_with_parent() -> None:
    """Ask Linux to SIGKILL us when the parent dies; exit at once if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os._exit(1)


class Control:
    """`go` and `stop` events fed from stdin; the deadline also sets `stop`."""

    def __init__(self, deadline: float) -> None:
        self.go = asyncio.Event()
        self.stop = asyncio.Event()
        self.commands: asyncio.Queue[str] = asyncio.Queue()
        self.deadline = deadline
        self._reader_task: asyncio.Task[None] | None = None

    async def attach(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        self._reader_task = asyncio.create_task(self._read(reader))
        loop.call_later(self.deadline, self._expire)
        # Hard stop if a graceful stop hangs.
        loop.call_later(self.deadline + 20, os._exit, 3)

    def _expire(self) -> None:
        self.go.set()
        self.stop.set()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            line = await reader.readline()
            word = line.decode().strip()
            if not line or word == "stop":
                self.go.set()
                self.stop.set()
                return
            if word == "go":
                self.go.set()
            elif word:
                self.commands.put_nowait(word)

    async def wait_stop(self) -> None:
        await self.stop.wait()

    async def next_command(self) -> str | None:
        """The next command line, or None once `stop` is set."""
        getter = asyncio.ensure_future(self.commands.get())
        stopper = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait([getter, stopper], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if getter.done():
            return getter.result()
        getter.cancel()
        return None


async def report_progress(recorder: Any, every: float = 0.2) -> None:
    """While draining: `handled` counts, so the parent can tell when every job has run."""
    last = -1
    while True:
        await asyncio.sleep(every)
        if recorder.handled != last:
            last = recorder.handled
            emit({"event": "handled", "n": last, "last_start": recorder.last_start})


def cpu_seconds() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _until_stopped(runner: Any, control: Control) -> bool:
    """Drain unless `stop` comes first (then stop gracefully, else cancel); True if drained."""
    task = asyncio.ensure_future(runner.drain())
    stopper = asyncio.ensure_future(control.stop.wait())
    await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task.done():
        task.result()
        return True
    runner.request_stop()
    await asyncio.wait([task], timeout=5)
    if task.done():
        return False
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return False


class AllocationTrace:
    """`tracemalloc` in a worker or producer (spec `tracemalloc`: frames, baseline_after
    seconds after `go`): the largest growths between that baseline and the end."""

    def __init__(self, options: dict[str, Any] | None) -> None:
        self.options = options
        self.baseline: Any = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.options:
            import tracemalloc

            tracemalloc.start(int(self.options.get("frames", 10)))

    def after_go(self) -> None:
        if self.options:
            self._task = asyncio.create_task(self._baseline(float(self.options["baseline_after"])))

    async def _baseline(self, delay: float) -> None:
        import tracemalloc

        await asyncio.sleep(delay)
        self.baseline = tracemalloc.take_snapshot()

    def report(self, top: int = 25) -> dict[str, Any] | None:
        if not self.options:
            return None
        import tracemalloc

        if self._task is not None:
            self._task.cancel()
        snapshot = tracemalloc.take_snapshot()
        traced, peak = tracemalloc.get_traced_memory()
        if self.baseline is None:
            stats = snapshot.statistics("traceback")[:top]
            rows = [
                {"size": s.size, "count": s.count, "where": s.traceback.format()} for s in stats
            ]
            return {"traced": traced, "peak": peak, "baseline": False, "top": rows}
        diffs = snapshot.compare_to(self.baseline, "traceback")[:top]
        rows = [
            {
                "size_diff": d.size_diff,
                "size": d.size,
                "count_diff": d.count_diff,
                "where": d.traceback.format(),
            }
            for d in diffs
        ]
        return {"traced": traced, "peak": peak, "baseline": True, "top": rows}


async def _after_go(control: Control, trace: AllocationTrace) -> None:
    await control.go.wait()
    trace.after_go()


async def run_worker(spec: dict[str, Any], control: Control) -> dict[str, Any]:
    from benchmarks.clock import SeqClock
    from benchmarks.recorder import Recorder
    from benchmarks.systems import WorkerConfig, load_system

    config = WorkerConfig.from_json(spec["worker"])
    target_running = int(spec.get("report_running_at", 0))

    def on_running(n: int) -> None:
        if target_running and n == target_running:
            emit({"event": "progress", "running": n, "rss": rss_bytes()})

    trace = AllocationTrace(spec.get("tracemalloc"))
    trace.start()
    clock = SeqClock.attach(spec.get("clock"))
    recorder = Recorder(clock, on_running)
    system = load_system(spec["system"], spec["dsn"])
    runner = system.worker(config, recorder.handle)
    await runner.prepare()
    emit({"event": "ready", "pid": os.getpid(), "rss": rss_bytes()})
    await control.go.wait()
    trace.after_go()
    ticker = asyncio.create_task(report_progress(recorder)) if config.mode == "drain" else None
    user0, sys0 = cpu_seconds()
    t_go = time.time()
    try:
        timed_out = False
        if config.mode == "drain":
            timed_out = not await _until_stopped(runner, control)
        else:
            await runner.serve(control.wait_stop)
        t_end = time.time()
        user1, sys1 = cpu_seconds()
    finally:
        if ticker is not None:
            ticker.cancel()
        await runner.close()
    return {
        "t_go": t_go,
        "t_end": t_end,
        "timed_out": timed_out,
        "cpu_user": user1 - user0,
        "cpu_sys": sys1 - sys0,
        "rss": rss_bytes(),
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        **recorder.report(),
        **({"tracemalloc": trace.report()} if trace.options else {}),
    }


async def main_async(spec: dict[str, Any]) -> None:
    control = Control(float(spec.get("deadline", 300)))
    await control.attach()
    try:
        if spec["role"] == "worker":
            result = await run_worker(spec, control)
        elif spec["role"] == "producer":
            from benchmarks.producers import run_producer

            trace = AllocationTrace(spec.get("tracemalloc"))
            trace.start()
            baseline = asyncio.create_task(_after_go(control, trace))
            result = await run_producer(spec, control, emit)
            baseline.cancel()
            if trace.options:
                result = {**result, "tracemalloc": trace.report()}
        elif spec["role"] == "admin":
            from benchmarks.systems.aiopgq_system import run_admin

            result = await run_admin(spec)
        else:
            raise ValueError(f"unknown role {spec['role']!r}")
    except Exception as exc:
        traceback.print_exc()
        emit({"event": "error", "error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(2) from exc
    emit({"event": "result", **result})


def main() -> None:
    die_with_parent()
    import_aiopgq()  # before anything imports aiopgq
    spec = json.loads(sys.argv[1])
    with contextlib.suppress(KeyboardInterrupt):
        if spec.get("loop") == "uvloop":
            import uvloop  # only when asked for: it is not a benchmark requirement

            uvloop.run(main_async(spec))
        else:
            asyncio.run(main_async(spec))


if __name__ == "__main__":
    main()
