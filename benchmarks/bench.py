"""Shared state of a run and the steps every workload uses (drain a table, specs, output)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks import processes
from benchmarks.config import Options
from benchmarks.database import ServerInfo, checkpoint
from benchmarks.processes import Child, ChildGroup
from benchmarks.report import Results, render, write_json, write_plot
from benchmarks.systems import System, WorkerConfig
from benchmarks.trees import REPO_ROOT, git_commit, git_describe, imports_seen


@dataclass
class DrainOutcome:
    jobs: int
    seconds: float
    handled: int
    finished: int
    cpu_seconds: float
    timed_out: bool
    stopped: bool = False
    commits: int = 0  # transactions committed in the database while draining
    server_cpu_seconds: float = 0.0  # the server's processes (every backend, WAL writer...)
    per_worker: list[dict[str, Any]] = field(default_factory=list)
    # go -> the last worker's first handler start (connecting, registering, first claim)
    first_job_seconds: float = float("nan")
    # the last handler start -> the end (last outcomes committed, the worker stopped)
    tail_seconds: float = float("nan")

    @property
    def rate(self) -> float:
        return self.handled / self.seconds if self.seconds > 0 else float("nan")

    @property
    def exact(self) -> bool:
        return self.handled == self.jobs and self.finished == self.jobs and not self.timed_out


def server_cpu() -> dict[int, float]:
    """CPU seconds of every PostgreSQL server process on this host, by pid: utime + stime,
    plus cutime + cstime (the backends that ended and were reaped count in the
    postmaster's). All of them, not only the benchmark's backends: the WAL writer, the
    checkpointer and autovacuum work for the drain too. The drain's server CPU is the
    difference of the sums, the second read after its workers' backends ended."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, tail = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        if head.split("(", 1)[1] != "postgres":
            continue
        fields = tail.split()
        found[int(entry.name)] = sum(int(f) for f in fields[11:15]) / tick
    return found


async def committed_transactions(dsn: str) -> int:
    """pg_stat_database.xact_commit of the benchmark database (all sessions)."""
    conn = await asyncpg.connect(dsn)
    try:
        value = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return int(value)


def package_versions(baseline: Path | None = None) -> dict[str, str]:
    """Installed versions; the current tree's commit, and the `--baseline` tree's if any."""
    versions = {}
    for package in ("aiopgq", "pgqueuer", "procrastinate", "asyncpg", "psycopg"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    versions["aiopgq_git"] = git_describe()
    if baseline is not None:
        versions["aiopgq_base_git"] = git_describe(baseline)
    return versions


def host_load() -> dict[str, Any]:
    """Load average and CPU pressure: the machine is shared, so say how busy it was."""
    load: dict[str, Any] = {"loadavg": list(os.getloadavg())}
    try:
        with open("/proc/pressure/cpu") as f:
            load["cpu_pressure"] = f.readline().strip()
    except OSError:
        pass
    return load


async def watch_drain(
    children: list[Child], jobs: int, timeout: float, grace: float = 3.0
) -> tuple[list[dict[str, Any]], bool]:
    """Results of draining workers; stops them `grace` s after all `jobs` handlers ran."""
    handled = [0] * len(children)

    async def watch(index: int, child: Child) -> dict[str, Any]:
        while True:
            msg = await child.message(timeout)
            if msg["event"] == "handled":
                handled[index] = int(msg["n"])
            elif msg["event"] == "result":
                return msg

    tasks = [asyncio.create_task(watch(i, c)) for i, c in enumerate(children)]
    loop = asyncio.get_running_loop()
    all_ran_at: float | None = None
    stopped = False
    try:
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=0.1)
            if all_ran_at is None and sum(handled) >= jobs:
                all_ran_at = loop.time()
            if all_ran_at is not None and not stopped and loop.time() - all_ran_at > grace:
                stopped = True
                processes.stop([c for c, t in zip(children, tasks, strict=True) if not t.done()])
        return [t.result() for t in tasks], stopped
    finally:
        for t in tasks:
            t.cancel()


@dataclass
class Bench:
    opts: Options
    info: ServerInfo
    dsn: str
    systems: dict[str, System]
    started: float = field(default_factory=time.time)

    def order(self, round_no: int) -> list[str]:
        """Systems in a rotated order per round, so none always runs first or last."""
        names = list(self.systems)
        k = round_no % len(names) if names else 0
        return names[k:] + names[:k]

    def drain_config(self, name: str, mode: str = "drain") -> WorkerConfig:
        """Each system's throughput configuration (peers: their documented knobs)."""
        o = self.opts
        if name == "pgqueuer":
            return WorkerConfig(
                mode=mode, concurrency=o.pgqueuer_concurrency, batch=o.pgqueuer_batch
            )
        if name == "procrastinate":
            return WorkerConfig(mode=mode, concurrency=o.procrastinate_concurrency, batch=1)
        return WorkerConfig(mode=mode, concurrency=o.concurrency, batch=o.concurrency)

    def worker_spec(
        self, name: str, config: WorkerConfig, deadline: float, **extra: Any
    ) -> dict[str, Any]:
        return {
            "role": "worker",
            "system": name,
            "dsn": self.dsn,
            "loop": self.opts.loop,
            "worker": config.to_json(),
            "deadline": deadline,
            **self.systems[name].child_spec(),
            **extra,
        }

    def producer_spec(self, name: str, op: str, deadline: float, **extra: Any) -> dict[str, Any]:
        return {
            "role": "producer",
            "system": name,
            "dsn": self.dsn,
            "loop": self.opts.loop,
            "op": op,
            "deadline": deadline,
            **self.systems[name].child_spec(),
            **extra,
        }

    async def fresh(self, name: str) -> System:
        system = self.systems[name]
        await system.reset()
        return system

    async def drain(
        self,
        name: str,
        jobs: int,
        processes_count: int,
        config: WorkerConfig,
        load: bool = True,
        payload: Callable[[int], dict[str, Any]] = lambda i: {"i": i},
    ) -> DrainOutcome:
        """Load `jobs` (unless already loaded), then time W worker processes draining them."""
        system = self.systems[name]
        if load:
            await system.bulk_load(jobs, payload)
            await system.analyze()
        await checkpoint(self.dsn)
        finished_before = await system.finished_count()
        commits_before = await committed_transactions(self.dsn)
        deadline = 60 + jobs / 100
        async with ChildGroup() as group:
            children = await group.start_ready(
                name, self.worker_spec(name, config, deadline), count=processes_count
            )
            server_before = server_cpu()
            t_go = time.time()
            processes.go(children)
            outs, stopped = await watch_drain(children, jobs, deadline + 30)
        finished = await system.finished_count() - finished_before
        await asyncio.sleep(0.5)  # exited backends have flushed their statistics
        server_after = server_cpu()  # and were reaped: their CPU is the postmaster's now
        commits = await committed_transactions(self.dsn) - commits_before
        if stopped:
            # Burst mode did not return although every job ran (PGQueuer's drain mode
            # waits while future-dated jobs exist): the end is the last handler start.
            end = max(o["last_start"] for o in outs)
        else:
            end = max(o["t_end"] for o in outs)
        first_start = max((o["first_start"] for o in outs if o["handled"]), default=t_go)
        return DrainOutcome(
            jobs=jobs,
            seconds=end - t_go,
            stopped=stopped,
            commits=commits,
            server_cpu_seconds=sum(server_after.values()) - sum(server_before.values()),
            handled=sum(int(o["handled"]) for o in outs),
            finished=finished,
            cpu_seconds=sum(o["cpu_user"] + o["cpu_sys"] for o in outs),
            timed_out=any(o["timed_out"] for o in outs) and not stopped,
            per_worker=[
                {k: o[k] for k in ("handled", "cpu_user", "cpu_sys", "rss", "t_end")} for o in outs
            ],
            first_job_seconds=first_start - t_go,
            tail_seconds=end - max(o["last_start"] for o in outs),
        )

    def note_inexact(self, results: Results, name: str, round_no: int, out: DrainOutcome) -> None:
        if out.stopped:
            results.notes.append(
                f"{name} round {round_no}: burst mode had not returned 3 s after the last job "
                "ran; stopped, timed to the last handler start"
            )
        if not out.exact:
            results.notes.append(
                f"{name} round {round_no}: {out.jobs} jobs, handler ran {out.handled} times, "
                f"{out.finished} finished{', TIMED OUT' if out.timed_out else ''}"
            )

    def context_json(self) -> dict[str, Any]:
        o = self.opts
        return {
            "versions": package_versions(o.baseline),
            "commits": self.commits(),
            "aiopgq_imported_from": imports_seen(),
            "server": self.info.to_json(),
            "postgres_version": self.info.settings["server_version"],
            "fsync": self.info.settings["fsync"],
            "synchronous_commit": self.info.settings["synchronous_commit"],
            "cores": self.info.cores,
            "rounds": o.rounds,
            "quick": o.quick,
            "options": {
                k: str(v) if not isinstance(v, (int, float, list, bool)) else v
                for k, v in vars(o).items()
                if k != "dsn"
            },
        }

    def commits(self) -> dict[str, str]:
        """Full commit of the tree each aiopgq system imports (`git rev-parse HEAD`)."""
        commits = {"aiopgq": git_commit(REPO_ROOT)}
        if self.opts.baseline is not None:
            commits["aiopgq-base"] = git_commit(self.opts.baseline)
        return commits

    def finish(self, results: Results) -> None:
        print(render(results), flush=True)
        out_dir = self.opts.results_dir
        context = {**self.context_json(), "host_load_at_end": host_load()}
        write_json(results, out_dir / f"{results.workload}.json", context)
        if self.opts.plots:
            write_plot(results, out_dir / f"{results.workload}.png", self.info.short)
        print(f"  -> {out_dir / (results.workload + '.json')}\n", flush=True)
