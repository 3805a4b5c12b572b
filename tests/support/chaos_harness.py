"""Chaos harness: CLI worker processes on one database, a ledger, faults, and invariants.

A `Cluster` runs `python -m aiopgq worker tests.support.chaos_app:queue` processes against one
database, enqueues work through the public API, injects faults (SIGKILL, SIGTERM,
pg_terminate_backend, server restart) and checks afterwards what must hold on a queue's worst
day: every job ends done (or failed where the test made it fail), nothing stays pending or
running, a job ran twice only if it was in flight when its worker or connection was lost,
and the workers are back to full speed.

The harness keeps its own connections apart (application_name `aiopgq-chaos-harness`) so
that "every aiopgq connection" means the workers' pools and listeners only.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from aiopgq import Queue
from aiopgq._db.transient import is_transient

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.support.chaos_app:queue"
SCHEMA = "chaos"
HARNESS_APP = "aiopgq-chaos-harness"
LISTENER_PREFIX = "aiopgq-listener "
HEARTBEAT_INTERVAL = 0.5
VISIBILITY_TIMEOUT = 3.0
# The CLI keeps the default maintenance interval (5 s): a lost lease is rescued within
# VISIBILITY_TIMEOUT + 5 s of the worker's last heartbeat.
# The producer does not import chaos_app, so it passes max_attempts itself. A job claimed
# in the same batch as a poison job dies with it: leave room for a few such losses.
WORK_ATTEMPTS = 10

LEDGER_DDL = f"""
CREATE TABLE IF NOT EXISTS "{SCHEMA}".ledger (
    token uuid PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    task text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ledger_job_id ON "{SCHEMA}".ledger (job_id);
"""


def _die_with_parent() -> None:
    """In the worker child: SIGKILL it if the test process dies (no orphans retrying forever)."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def log(message: str) -> None:
    """Progress for `pytest -s`."""
    print(f"[chaos] {message}", flush=True)


@dataclass
class Death:
    """A worker process that ended by a kill, and the jobs it held at that moment."""

    slot: int
    pid: int
    returncode: int | None
    cause: str
    at: float
    in_flight: frozenset[int]


@dataclass
class WorkerProc:
    slot: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    ending: bool = False  # the harness is ending it on purpose
    death: Death | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Fault:
    """One injected fault: what, when (monotonic), and the jobs in flight around it."""

    kind: str
    at: float
    in_flight: frozenset[int] = frozenset()
    detail: dict[str, Any] = field(default_factory=dict)


class Cluster:
    """Worker processes started through the CLI against one database, plus fault injection."""

    def __init__(
        self,
        name: str,
        dsn: str,
        workdir: Path,
        *,
        workers: int = 3,
        concurrency: int = 8,
        poll_interval: float = 30.0,
        grace_period: float = 5.0,
        private_queues: bool = False,
        seed: int | None = None,
        bouncer_dsn: str | None = None,
    ) -> None:
        self.name = name
        self.dsn = dsn
        # Workers through pgbouncer (transaction mode), their listeners direct; the
        # harness always connects directly.
        self.bouncer_dsn = bouncer_dsn
        self.workdir = workdir
        self.size = workers
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.grace_period = grace_period
        self.private_queues = private_queues
        self.seed = random.randrange(2**32) if seed is None else seed
        self.random = random.Random(self.seed)
        self.procs: list[WorkerProc] = []  # every process ever started, for teardown
        self.current: dict[int, WorkerProc] = {}  # slot -> the process serving it now
        self.deaths: list[Death] = []
        self.faults: list[Fault] = []
        self.auto_restart = True
        self._pool: asyncpg.Pool | None = None
        self._producer: Queue | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._death_lock = asyncio.Lock()
        self._spawned = 0

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Cluster:
        # Listeners are told apart by the worker pid in their application_name, which
        # PostgreSQL cuts at 63 bytes: "aiopgq-listener <host>:<pid>:<8 hex>".
        longest = f"{LISTENER_PREFIX}{socket.gethostname()}:4194304:01234567"
        assert len(longest) <= 63, f"host name too long to find listeners by pid: {longest}"
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=1,
            max_size=4,
            server_settings={"application_name": HARNESS_APP},
        )
        self._producer = Queue(pool=self._pool, schema=SCHEMA)
        await self._producer.migrate()
        await self.execute(LEDGER_DDL)
        self._monitor = asyncio.create_task(self._watch())
        log(f"{self.name}: seed {self.seed}, logs in {self.workdir}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Kill every process this cluster started (by pid), close the harness pool."""
        if self._monitor is not None:
            self._monitor.cancel()
            try:
                await self._monitor
            except (asyncio.CancelledError, Exception):
                pass
            self._monitor = None
        for wp in self.procs:
            if wp.proc.poll() is None:
                wp.ending = True
                wp.proc.kill()
        for wp in self.procs:
            try:
                wp.proc.wait(10)
            except subprocess.TimeoutExpired:
                log(f"worker pid {wp.pid} did not exit after SIGKILL")
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), 10)
            except Exception:
                pool.terminate()

    # -- the harness's own database access (rides out restarts) ----------------------------

    @property
    def producer(self) -> Queue:
        assert self._producer is not None, "use the cluster as `async with Cluster(...)`"
        return self._producer

    async def _retrying(self, op: Callable[[Any], Awaitable[T]]) -> T:
        assert self._pool is not None
        deadline = time.monotonic() + 60
        while True:
            try:
                async with self._pool.acquire(timeout=10) as conn:
                    return await op(conn)
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    def connection(self) -> Any:
        """A harness connection of its own (`async with c.connection() as conn`)."""
        assert self._pool is not None
        return self._pool.acquire(timeout=10)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._retrying(lambda conn: conn.fetch(sql, *args))

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._retrying(lambda conn: conn.fetchval(sql, *args))

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._retrying(lambda conn: conn.execute(sql, *args))

    # -- worker processes --------------------------------------------------------------------

    def queues_of(self, slot: int) -> list[str]:
        return ["default", f"w{slot}"] if self.private_queues else ["default"]

    def spawn(self, slot: int) -> WorkerProc:
        """Start the worker process of `slot` (replacing a dead one)."""
        self._spawned += 1
        log_path = self.workdir / f"{self.name}-worker{slot}-{self._spawned}.log"
        args = [
            sys.executable,
            "-m",
            "aiopgq",
            "worker",
            APP,
            "--queues",
            ",".join(self.queues_of(slot)),
            "--concurrency",
            str(self.concurrency),
            "--heartbeat-interval",
            str(HEARTBEAT_INTERVAL),
            "--visibility-timeout",
            str(VISIBILITY_TIMEOUT),
            "--poll-interval",
            str(self.poll_interval),
            "--grace-period",
            str(self.grace_period),
        ]
        if self.bouncer_dsn is not None:
            args += ["--listen-dsn", self.dsn, "--statement-cache-size", "0"]
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(
            AIOPGQ_DSN=self.bouncer_dsn or self.dsn,
            AIOPGQ_CHAOS_SCHEMA=SCHEMA,
            PYTHONPATH=str(ROOT),
        )
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                args,
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                preexec_fn=_die_with_parent,
            )
        wp = WorkerProc(slot, proc, log_path, time.monotonic())
        self.procs.append(wp)
        self.current[slot] = wp
        return wp

    async def start(self) -> None:
        """Start every worker and wait until each one LISTENs."""
        for slot in range(self.size):
            self.spawn(slot)
        await self.wait_ready()

    async def wait_ready(self, within: float = 60.0) -> float:
        """Wait until every current worker is alive and its listener LISTENs; seconds waited."""
        started = time.monotonic()
        while True:
            listening = await self.listeners()
            missing = [wp for wp in self.current.values() if wp.pid not in listening]
            dead = [wp for wp in self.current.values() if not wp.alive and not wp.ending]
            if not missing:
                return time.monotonic() - started
            if time.monotonic() - started > within:
                raise AssertionError(
                    f"workers {[wp.pid for wp in missing]} not listening after {within} s "
                    f"(dead: {[(wp.pid, wp.proc.returncode) for wp in dead]})\n"
                    + self.log_tails(missing)
                )
            await asyncio.sleep(0.05)

    async def wait_relistened(self, old: dict[int, int], within: float = 10.0) -> float:
        """Wait until every current worker LISTENs on a new connection (not one in `old`)."""
        started = time.monotonic()
        stale = set(old.values())
        while True:
            listening = await self.listeners()
            if all(listening.get(wp.pid, -1) not in stale | {-1} for wp in self.current.values()):
                return time.monotonic() - started
            if time.monotonic() - started > within:
                raise AssertionError(
                    f"listeners not back {within} s after they were lost: before {old}, "
                    f"now {listening}\n" + self.log_tails(self.current.values())
                )
            await asyncio.sleep(0.01)

    def pids(self) -> dict[int, int]:
        """slot -> pid of the process serving it."""
        return {slot: wp.pid for slot, wp in self.current.items()}

    async def _watch(self) -> None:
        """Notice workers that died on their own (a poison job), record it, restart them."""
        while True:
            await asyncio.sleep(0.05)
            for wp in list(self.current.values()):
                if wp.ending or wp.death is not None or wp.alive:
                    continue
                async with self._death_lock:
                    if wp.death is not None:
                        continue
                    try:
                        await self._record_death(wp, f"died on its own (exit {wp.proc.returncode})")
                    except Exception as exc:  # keep watching; the invariants will tell
                        log(f"{self.name}: recording the death of pid {wp.pid} failed: {exc!r}")
                        wp.death = Death(
                            wp.slot, wp.pid, wp.proc.returncode, "unrecorded", 0, frozenset()
                        )
                if self.auto_restart and self.current.get(wp.slot) is wp:
                    self.spawn(wp.slot)

    async def _record_death(self, wp: WorkerProc, cause: str) -> Death:
        # Right after the death nothing can have touched its rows yet (the lease outlives
        # this query by seconds): the running rows locked by it are exactly its jobs in flight.
        in_flight = await self.running_ids(wp.pid)
        death = Death(wp.slot, wp.pid, wp.proc.returncode, cause, time.monotonic(), in_flight)
        wp.death = death
        self.deaths.append(death)
        log(f"{self.name}: worker {wp.slot} pid {wp.pid} {cause}: {len(in_flight)} jobs in flight")
        return death

    async def wait_exit(self, wp: WorkerProc, within: float) -> float:
        started = time.monotonic()
        while wp.proc.poll() is None:
            if time.monotonic() - started > within:
                raise AssertionError(
                    f"worker pid {wp.pid} still running {within} s after the signal\n"
                    + self.log_tails([wp])
                )
            await asyncio.sleep(0.01)
        return time.monotonic() - started

    async def sigkill(self, slot: int, *, restart: bool = True) -> Death:
        """SIGKILL the worker of `slot` mid-batch; restart it at once (like a supervisor)."""
        wp = self.current[slot]
        wp.ending = True
        at = time.monotonic()
        os.kill(wp.pid, signal.SIGKILL)
        await self.wait_exit(wp, 10)
        async with self._death_lock:
            death = await self._record_death(wp, "SIGKILLed by the harness")
        self.faults.append(Fault("sigkill", at, death.in_flight, {"pid": wp.pid}))
        if restart:
            self.spawn(slot)
        return death

    async def busy_slot(self, within: float = 30.0) -> int:
        """A random slot whose worker is serving and holds running jobs right now."""
        deadline = time.monotonic() + within
        while True:
            rows = await self.fetch(
                f"SELECT DISTINCT locked_by FROM \"{SCHEMA}\".jobs WHERE status = 'running'"
            )
            holders = {int(r["locked_by"].split(":")[-2]) for r in rows}
            busy = [slot for slot, wp in self.current.items() if wp.pid in holders and wp.alive]
            if busy:
                return self.random.choice(sorted(busy))
            if time.monotonic() > deadline:
                raise AssertionError(f"no worker held a running job for {within} s")
            await asyncio.sleep(0.01)

    async def sigkill_busy_worker(self) -> Death:
        """SIGKILL a random worker that holds running jobs, mid-batch; restart it at once."""
        while True:
            slot = await self.busy_slot()
            wp = self.current[slot]
            # No await between this check and the kill: it is still the busy process
            # (not one that a poison job just killed and the watcher replaced).
            if wp.proc.poll() is None and not wp.ending:
                return await self.sigkill(slot)

    def send_sigterm(self, slot: int) -> WorkerProc:
        """SIGTERM the worker of `slot` (a graceful stop) and return at once."""
        wp = self.current[slot]
        wp.ending = True
        os.kill(wp.pid, signal.SIGTERM)
        return wp

    async def sigterm(self, slot: int, within: float) -> tuple[int | None, float]:
        """SIGTERM the worker of `slot`; return its exit code and how long it took to exit."""
        wp = self.send_sigterm(slot)
        elapsed = await self.wait_exit(wp, within)
        return wp.proc.returncode, elapsed

    # -- database faults -------------------------------------------------------------------

    async def wait_for_lock_waiters(self, within: float = 5.0) -> list[int]:
        """Backend pids of worker connections waiting on a lock (waits until there is one)."""
        deadline = time.monotonic() + within
        while True:
            rows = await self.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND application_name <> $1",
                HARNESS_APP,
            )
            if rows or time.monotonic() > deadline:
                return [r["pid"] for r in rows]
            await asyncio.sleep(0.01)

    async def advisory_locks(self) -> list[dict[str, Any]]:
        """Advisory locks held or awaited (who, which, mode), for failure messages."""
        rows = await self.fetch(
            "SELECT a.pid, a.application_name, l.classid, l.objid, l.mode, l.granted "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND a.datname = current_database() ORDER BY a.pid"
        )
        return [dict(r) for r in rows]

    async def running_ids(self, pid: int | None = None) -> frozenset[int]:
        """Jobs running now (of the worker process `pid` only, if given)."""
        rows = await self.fetch(
            f"SELECT id FROM \"{SCHEMA}\".jobs WHERE status = 'running' AND locked_by LIKE $1",
            "%" if pid is None else f"%:{pid}:%",
        )
        return frozenset(r["id"] for r in rows)

    async def slot_running(self, job_id: int, within: float = 10.0) -> int:
        """The slot whose worker runs the job (waits until one does)."""
        deadline = time.monotonic() + within
        while True:
            pid = await self.holder(job_id)
            for slot, wp in self.current.items():
                if wp.pid == pid:
                    return slot
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not running within {within} s")
            await asyncio.sleep(0.01)

    async def holder(self, job_id: int) -> int | None:
        """pid of the worker process that holds the job now, if it is running."""
        locked_by = await self.fetchval(
            f"SELECT locked_by FROM \"{SCHEMA}\".jobs WHERE id = $1 AND status = 'running'",
            job_id,
        )
        return None if locked_by is None else int(locked_by.split(":")[-2])

    async def listeners(self) -> dict[int, int]:
        """worker pid -> backend pid of its LISTEN connection (once it has LISTENed)."""
        rows = await self.fetch(
            "SELECT pid, application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE $1 "
            "AND query <> ''",  # its first statement is the LISTEN
            LISTENER_PREFIX + "%",
        )
        found: dict[int, int] = {}
        for row in rows:
            # application_name = "aiopgq-listener <host>:<pid>:<uuid8>"
            parts = row["application_name"][len(LISTENER_PREFIX) :].split(":")
            assert len(parts) >= 3, f"cannot read a pid from {row['application_name']!r}"
            found[int(parts[-2])] = row["pid"]
        return found

    async def terminate(self, *, listeners_only: bool = False) -> list[asyncpg.Record]:
        """pg_terminate_backend every aiopgq connection of this database at once."""
        condition = "AND application_name LIKE $2" if listeners_only else "AND $2::text IS NULL"
        return await self.fetch(
            "SELECT pid, application_name, pg_terminate_backend(pid) AS terminated "
            "FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend' "
            f"AND pid <> pg_backend_pid() AND application_name <> $1 {condition}",
            HARNESS_APP,
            LISTENER_PREFIX + "%" if listeners_only else None,
        )

    # -- work --------------------------------------------------------------------------------

    async def enqueue_work(
        self, n: int, *, ms: tuple[int, int] = (5, 20), priority: int = 0
    ) -> list[int]:
        """n bulk jobs (each sleeps a random 5-20 ms), in one statement."""
        payloads = [{"n": i, "ms": self.random.randint(*ms)} for i in range(n)]
        jobs = await self.producer.enqueue_many(
            "chaos.work", payloads, priority=priority, max_attempts=WORK_ATTEMPTS
        )
        return [job.id for job in jobs]

    async def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | None = None,
        max_attempts: int = WORK_ATTEMPTS,
        connection: asyncpg.Connection | None = None,
    ) -> int:
        job = await self.producer.enqueue(
            task,
            payload or {},
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            connection=connection,
            delay=None if delay is None else timedelta(seconds=delay),
        )
        return job.id

    async def done_count(self, ids: list[int]) -> int:
        return int(
            await self.fetchval(
                f"SELECT count(*) FROM \"{SCHEMA}\".jobs WHERE id = ANY($1) AND status = 'done'",
                ids,
            )
        )

    async def wait_fraction_done(self, ids: list[int], fraction: float, within: float = 60) -> None:
        target = int(len(ids) * fraction)
        deadline = time.monotonic() + within
        while await self.done_count(ids) < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"{fraction:.0%} of {len(ids)} jobs not done in {within} s")
            await asyncio.sleep(0.02)

    async def wait_resumed(
        self, since_done: int, ids: list[int], jobs: int, within: float
    ) -> float:
        """Seconds until `jobs` more of `ids` are done than `since_done` (work resumed)."""
        started = time.monotonic()
        total = len(ids)
        while True:
            done = await self.done_count(ids)
            if done >= min(since_done + jobs, total):
                return time.monotonic() - started
            if time.monotonic() - started > within:
                raise AssertionError(f"no progress {within} s after the fault ({done}/{total})")
            await asyncio.sleep(0.02)

    async def wait_settled(self, within: float) -> float:
        """Wait until no job is pending or running; seconds waited. Fails with the stragglers."""
        started = time.monotonic()
        while True:
            left = await self.fetchval(
                f"SELECT count(*) FROM \"{SCHEMA}\".jobs WHERE status IN ('pending', 'running')"
            )
            if left == 0:
                return time.monotonic() - started
            if time.monotonic() - started > within:
                rows = await self.fetch(
                    "SELECT id, task, queue, status::text, attempts, locked_by, "
                    "now() - heartbeat_at AS since_heartbeat, run_at - now() AS runs_in "
                    f"FROM \"{SCHEMA}\".jobs WHERE status IN ('pending', 'running') "
                    "ORDER BY id LIMIT 20"
                )
                alive = {slot: (wp.pid, wp.alive) for slot, wp in self.current.items()}
                raise AssertionError(
                    f"{left} jobs still pending or running {within} s after the faults "
                    f"(workers {alive}):\n"
                    + "\n".join(str(dict(r)) for r in rows)
                    + "\n"
                    + self.log_tails(self.current.values())
                )
            await asyncio.sleep(0.05)

    async def probe(self, n: int = 500) -> float:
        """Throughput in jobs/s: n bulk jobs from enqueue to the last completion (server clock)."""
        ids = await self.enqueue_work(n)
        deadline = time.monotonic() + 120
        while await self.done_count(ids) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"throughput probe of {n} jobs did not finish in 120 s")
            await asyncio.sleep(0.02)
        seconds = await self.fetchval(
            "SELECT extract(epoch FROM max(finished_at) - min(created_at))::float8 "
            f'FROM "{SCHEMA}".jobs WHERE id = ANY($1)',
            ids,
        )
        return n / max(float(seconds), 1e-3)

    async def first_run_at(self, job_id: int, within: float = 10.0) -> datetime:
        """When the job first started running (its first ledger row, server clock)."""
        deadline = time.monotonic() + within
        while True:
            at = await self.fetchval(
                f'SELECT min(at) FROM "{SCHEMA}".ledger WHERE job_id = $1', job_id
            )
            if isinstance(at, datetime):
                return at
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} did not start within {within} s")
            await asyncio.sleep(0.01)

    async def start_latency(self, job_id: int, within: float = 10.0) -> float:
        """Seconds from the job's enqueue (created_at) to its first execution (ledger)."""
        deadline = time.monotonic() + within
        while True:
            latency = await self.fetchval(
                "SELECT extract(epoch FROM min(l.at) - j.created_at)::float8 "
                f'FROM "{SCHEMA}".jobs j JOIN "{SCHEMA}".ledger l ON l.job_id = j.id '
                "WHERE j.id = $1 GROUP BY j.created_at",
                job_id,
            )
            if latency is not None:
                return float(latency)
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} did not start within {within} s")
            await asyncio.sleep(0.01)

    # -- invariants --------------------------------------------------------------------------

    async def executions(self) -> dict[int, list[asyncpg.Record]]:
        rows = await self.fetch(
            f'SELECT job_id, attempt, pid, at FROM "{SCHEMA}".ledger ORDER BY job_id, at'
        )
        runs: dict[int, list[asyncpg.Record]] = {}
        for row in rows:
            runs.setdefault(row["job_id"], []).append(row)
        return runs

    def in_flight_at_faults(self) -> frozenset[int]:
        lost: set[int] = set()
        for death in self.deaths:
            lost |= death.in_flight
        for fault in self.faults:
            lost |= fault.in_flight
        return frozenset(lost)

    async def check_invariants(
        self,
        *,
        expect_failed: Collection[int] = (),
        may_repeat: Collection[int] = (),
        attempts_count_repeats: bool = True,
    ) -> dict[str, Any]:
        """Assert the invariants over every job of the scenario; return the figures.

        - every job ended `done`, except `expect_failed`, which ended `failed`;
        - nothing is left pending or running (call after `wait_settled`);
        - every job ran at least once (the ledger has a row);
        - a job ran more than once only if it was in flight when a worker or its
          connections were lost (`in_flight_at_faults`), or is listed in `may_repeat`;
        - with `attempts_count_repeats`, each repeat ran under a higher attempt number
          (a crash counts the attempt, so a job that kills its worker cannot loop).
        """
        statuses = {
            r["status"]: r["n"]
            for r in await self.fetch(
                f'SELECT status::text, count(*) AS n FROM "{SCHEMA}".jobs GROUP BY status'
            )
        }
        assert statuses.get("pending", 0) == 0 and statuses.get("running", 0) == 0, statuses
        rows = await self.fetch(
            "SELECT id, status::text, attempts, left(last_error, 300) AS error "
            f"FROM \"{SCHEMA}\".jobs WHERE status <> 'done' ORDER BY id"
        )
        not_done = {r["id"]: r["status"] for r in rows}
        expected = {job_id: "failed" for job_id in expect_failed}
        assert not_done == expected, (
            f"jobs not done: {not_done}, expected {expected}:\n"
            + "\n".join(
                f"job {r['id']} {r['status']} after {r['attempts']} attempts: {r['error']}"
                for r in rows
                if r["id"] not in expected
            )
        )

        never_ran = await self.fetch(
            f'SELECT id FROM "{SCHEMA}".jobs j WHERE NOT EXISTS '
            f'(SELECT 1 FROM "{SCHEMA}".ledger l WHERE l.job_id = j.id) LIMIT 20'
        )
        assert not never_ran, f"jobs finished without running: {[r['id'] for r in never_ran]}"

        runs = await self.executions()
        repeated = {job_id: rows for job_id, rows in runs.items() if len(rows) > 1}
        allowed = self.in_flight_at_faults() | frozenset(may_repeat)
        unexplained = {job_id: rows for job_id, rows in repeated.items() if job_id not in allowed}
        assert not unexplained, "jobs ran more than once without being in flight at a fault:\n" + (
            "\n".join(
                f"job {job_id}: "
                + ", ".join(f"attempt {r['attempt']} pid {r['pid']}" for r in rows)
                for job_id, rows in list(unexplained.items())[:20]
            )
        )
        if attempts_count_repeats:
            for job_id, rows in repeated.items():
                if job_id in may_repeat:
                    continue
                attempts = [r["attempt"] for r in rows]
                assert attempts == sorted(set(attempts)), (
                    f"job {job_id} ran again without counting the attempt: {attempts}"
                )
        total = sum(statuses.values())
        for job_id, rows in list(repeated.items())[:5]:
            log(
                f"{self.name}: job {job_id} ran {len(rows)} times: "
                + ", ".join(
                    f"attempt {r['attempt']} pid {r['pid']} at {r['at']:%H:%M:%S.%f}" for r in rows
                )
            )
        return {
            "jobs": total,
            "executions": sum(len(rows) for rows in runs.values()),
            "duplicates": len(repeated),
            "extra_executions": sum(len(rows) - 1 for rows in repeated.values()),
            "in_flight_at_faults": len(self.in_flight_at_faults()),
            "failed": len(not_done),
        }

    def assert_alive(self, pids: dict[int, int]) -> None:
        """The same processes still serve every slot: nothing died, nothing was restarted."""
        now = self.pids()
        dead = [(wp.pid, wp.proc.returncode) for wp in self.current.values() if not wp.alive]
        assert now == pids and not dead, (
            f"workers changed: before {pids}, now {now}, dead {dead}\n"
            + self.log_tails(self.current.values())
        )

    # -- reporting ---------------------------------------------------------------------------

    def log_tails(self, procs: Iterable[WorkerProc], lines: int = 25) -> str:
        out = []
        for wp in procs:
            try:
                text = wp.log_path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                text = ["(no log)"]
            out.append(f"--- worker {wp.slot} pid {wp.pid} ({wp.log_path}):")
            out.extend(text)
        return "\n".join(out)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def report(scenario: str, figures: dict[str, Any]) -> None:
    """Print the figures; append them as one JSON line to $AIOPGQ_CHAOS_REPORT if set."""
    rounded = {k: _rounded(v) for k, v in figures.items()}
    log(f"{scenario}: " + ", ".join(f"{k}={v}" for k, v in rounded.items()))
    path = os.environ.get("AIOPGQ_CHAOS_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"scenario": scenario, **rounded}) + "\n")
