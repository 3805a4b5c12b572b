"""Worker: builds the runtime's parts and wires them, here and nowhere else.

listener --notified--> wakeups <--slot freed-- dispatcher <--rows-- fetcher (claims)
                          |    <--flushed, retry times-- completer <--outcomes--+
                          +--wake--> fetcher
listener --pause/resume--> pauses read again (by claims); --cancel--> controls read the
job's status --> dispatcher (and heartbeat)
heartbeat: leases (saving reported progress; hearing of cancelled jobs), registry row;
fence: stops handlers whose leases it could not renew; maintenance: rescues, expires
dead workers' rows, prunes; scheduler: periodic ticks; observers: each job; /metrics.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Sequence
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import asyncpg
from anyio.abc import TaskGroup, TaskStatus

from .._db.dsn import check_dsn, redact
from .._db.outage import Outage
from .._enqueue_options import check_queue_name
from .._errors import ConfigurationError, SchemaError
from . import options
from .awake import AwakeRole
from .claims import Claims
from .completer import Completer
from .connections import connection_name, connector
from .contracts import QueueSpec
from .control import Controls
from .dispatcher import Dispatcher
from .fetcher import Fetcher, FetchLoop
from .handlers import make_handlers
from .heartbeat import run_heartbeat
from .holding import HoldingFetcher
from .key_limits import declared_key_limits, prepare_key_limits
from .leases import Leases, run_fence
from .listener import Listener
from .maintenance import run_maintenance
from .pauses import Pauses
from .presence import Presence
from .progress import ProgressBoard
from .scheduler import Scheduler
from .shutdown import fetch_until_stopped
from .startup import start_worker
from .stops import StopRequests
from .wakeups import Wakeups
from .warm import warm_up
from .watchdog import LoopWatchdog

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

logger = logging.getLogger("aiopgq.worker")


class Worker:
    """Runs the jobs of some queues.

    >>> worker = queue.worker(queues=["default"], concurrency=50)
    >>> await worker.run()          # or: async with worker: ...

    Finished rows are pruned by age and status: done rows after `retention` (1 day),
    failed rows after `failed_retention` and cancelled rows after
    `cancelled_retention` (7 days each). Seconds or a timedelta; None keeps them.

    Every duration below is seconds (a number >= 0) or a timedelta.

    Args:
        queue: the Queue whose tasks it runs.
        queues: the queues it claims from (default None: every queue of the tasks).
        concurrency: the most jobs it runs at once, and the largest batch it claims
            (default 10).
        poll_interval: how long it sleeps when no NOTIFY wakes it (default 2).
        recheck_interval: after a short, non-empty batch, how soon it looks again before
            sleeping (default 0.003).
        listen: True (default): LISTEN for new jobs; False: poll only.
        listen_dsn: a direct address for the LISTEN connection, e.g. behind pgbouncer
            (default None: the queue's database).
        heartbeat_interval: how often it extends its jobs' leases (default 5).
        visibility_timeout: how long a lease lasts without a heartbeat, at least twice
            `heartbeat_interval` (default 30).
        grace_period: how long running jobs may finish after `stop()` (default 30).
        completion_batch_size: outcomes written at once past this many (default 1000).
        completion_interval: the longest an outcome waits to be written (default 0.01).
        maintenance_interval: how often it rescues, prunes and archives (default 5).
        retention: how long done rows are kept (default one day; None: forever).
        failed_retention: how long failed rows are kept (default 7 days; None: forever).
        cancelled_retention: how long cancelled rows are kept (default 7 days; None:
            forever).
        hold_transaction: True: claim and complete each batch in one held transaction
            (default False; no `ctx.transaction()` then).
        blocked_loop_warning: warn when a handler blocks the event loop this long
            (default 1; None: never).
        connect_timeout: how long `run()` retries an unreachable database at start
            (default 30).
        periodic: True (default): enqueue the ticks of the periodic tasks of its queues.
        name: the start of its id, which jobs it runs show as `locked_by` (default None:
            the host name).
        metrics_port: serve Prometheus /metrics on this TCP port (default None: no
            server; 0: a free port).
        metrics_host: the address /metrics listens on (default "127.0.0.1").
        metrics_registry: the prometheus_client registry /metrics serves (default None:
            the default registry).

    Raises:
        ConfigurationError: no queues, an option out of its range (named), or
            `metrics_port` without prometheus-client installed.
        ValueError: a bad queue name.
    """

    def __init__(
        self,
        queue: QueueSpec,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        poll_interval: float | timedelta = 2.0,
        recheck_interval: float | timedelta = 0.003,
        listen: bool = True,
        listen_dsn: str | None = None,
        heartbeat_interval: float | timedelta = 5.0,
        visibility_timeout: float | timedelta = 30.0,
        grace_period: float | timedelta = 30.0,
        completion_batch_size: int = 1000,
        completion_interval: float | timedelta = 0.01,
        maintenance_interval: float | timedelta = 5.0,
        retention: float | timedelta | None = timedelta(days=1),
        failed_retention: float | timedelta | None = timedelta(days=7),
        cancelled_retention: float | timedelta | None = timedelta(days=7),
        hold_transaction: bool = False,
        blocked_loop_warning: float | timedelta | None = 1.0,
        connect_timeout: float | timedelta = 30.0,
        periodic: bool = True,
        name: str | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.queue = queue
        names = list(queues) if queues else sorted({t.queue_name for t in queue.tasks.values()})
        if not names:
            raise ConfigurationError(
                "the worker has no queues: pass queues=[...] or register tasks first"
            )
        self.queues = [check_queue_name(q) for q in dict.fromkeys(names)]
        self.concurrency = options.positive_int(concurrency, "concurrency")
        self.poll_interval = options.seconds(poll_interval, "poll_interval") or 0.001
        self.recheck_interval = options.seconds(recheck_interval, "recheck_interval") or 0.0
        self.listen = listen
        # LISTEN and session locks need a direct address behind pgbouncer (docs/scaling.md).
        self.listen_dsn = check_dsn(listen_dsn) if listen_dsn else None
        self.heartbeat_interval = options.seconds(heartbeat_interval, "heartbeat_interval") or 0.1
        self.visibility_timeout = options.seconds(visibility_timeout, "visibility_timeout") or 0.0
        options.check_lease(self.visibility_timeout, self.heartbeat_interval)
        self.grace_period = options.seconds(grace_period, "grace_period") or 0.0
        self.completion_batch_size = options.positive_int(
            completion_batch_size, "completion_batch_size"
        )
        self.completion_interval = (
            options.seconds(completion_interval, "completion_interval") or 0.0
        )
        self.maintenance_interval = (
            options.seconds(maintenance_interval, "maintenance_interval") or 0.1
        )
        # Seconds kept per finished status (None: forever): failed/cancelled rows hold reasons.
        self.retention = options.seconds(retention, "retention", allow_none=True)
        self.failed_retention = options.seconds(
            failed_retention, "failed_retention", allow_none=True
        )
        self.cancelled_retention = options.seconds(
            cancelled_retention, "cancelled_retention", allow_none=True
        )
        self.hold_transaction = hold_transaction
        self.blocked_loop_warning = options.seconds(
            blocked_loop_warning, "blocked_loop_warning", allow_none=True
        )
        self.connect_timeout = options.seconds(connect_timeout, "connect_timeout") or 0.0
        self.metrics_port = options.metrics_port(metrics_port)
        self.metrics_host, self._metrics_registry = metrics_host, metrics_registry
        self.periodic = periodic  # tick the schedules of periodic tasks of our queues
        self.id = f"{name or socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._fetcher: FetchLoop | None = None
        self._dispatcher: Dispatcher | None = None
        self._claims: Claims | None = None  # of the current run: its connection is closed last
        self._listener: Listener | None = None
        self._stop_requested = False
        self._background: TaskGroup | None = None
        self.serving_metrics_port: int | None = None  # where /metrics listens, once it does
        warm_up()  # now, not in the first claims

    def __repr__(self) -> str:
        return f"<Worker {self.id} queues={self.queues} concurrency={self.concurrency}>"

    @property
    def running_jobs(self) -> int:
        """How many jobs this worker runs now (0 before it starts and after it stops)."""
        return len(self._dispatcher.running) if self._dispatcher else 0

    @property
    def listener_name(self) -> str:
        """application_name of this worker's LISTEN connection (in pg_stat_activity)."""
        return connection_name("listener", self.id)

    @property
    def listener(self) -> Listener | None:
        """The LISTEN connection's manager while running with `listen=True` (diagnostics)."""
        return self._listener

    def stop(self) -> None:
        """Stop fetching; running jobs get `grace_period` to finish, then go back to pending."""
        self._stop_requested = True
        if self._fetcher is not None:
            self._fetcher.stop()

    async def run(self, *, burst: bool = False) -> None:
        """Run until cancelled or stop(); with burst=True, until no runnable job is left.

        Args:
            burst: True: return once no runnable job is left (default False).

        Raises:
            CannotConnect: the database could not be reached within `connect_timeout`.
            SchemaError: the schema is missing or is not this aiopgq's version.
        """
        await self._run(burst=burst)

    async def _run(
        self, *, burst: bool, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        queue = self.queue
        self._claims = None
        opened_here = not queue.is_open
        await queue.open(retry_for=self.connect_timeout)
        try:
            dsn, _ = queue.connect_args()
            outage = Outage(redact(dsn) if dsn else "")  # one account of database trouble
            presence = Presence(
                queue.pool,
                queue.sql,
                self.id,
                queues=self.queues,
                concurrency=self.concurrency,
                heartbeat_interval=self.heartbeat_interval,
                outage=outage,
            )
            try:
                await self._serve(
                    queue.pool, presence, outage, burst=burst, task_status=task_status
                )
            except Exception as exc:
                refused = _schema_refused(exc)
                if refused is None:
                    raise
                raise refused from None  # the start's (startup.py), not in a task group's
            finally:
                # Both at once, neither raises: a server takes milliseconds to end the
                # fetcher's backend, the last two round trips of a stopping worker.
                with anyio.CancelScope(shield=True):
                    async with anyio.create_task_group() as ending:
                        ending.start_soon(presence.leave)
                        if self._claims is not None:
                            ending.start_soon(self._claims.drop_connection)
        finally:
            if opened_here:
                with anyio.CancelScope(shield=True):
                    await queue.close()

    async def _serve(
        self,
        pool: asyncpg.Pool,
        presence: Presence,
        outage: Outage,
        *,
        burst: bool,
        task_status: TaskStatus[None],
    ) -> None:
        sql = self.queue.sql
        observer = self.queue.observer
        traced = observer is not None and observer.reads_trace_context
        wakeups = Wakeups(self.queues)
        completer = Completer(
            pool,
            sql,
            self.id,
            wakeups=wakeups,
            outage=outage,
            batch_size=self.completion_batch_size,
            interval=self.completion_interval,
        )
        stops, leases, progress = StopRequests(), Leases(), ProgressBoard()
        handlers = make_handlers(self.queue, pool, self.id, stops, progress, self.hold_transaction)
        dispatcher = Dispatcher(
            self.queue.tasks,
            completer,
            wakeups,
            observer=observer,
            traced=traced,
            stops=stops,
            handlers=handlers,
        )

        def held_ids() -> list[int]:  # jobs whose lease is ours: running or not committed
            return list(dispatcher.running) + completer.in_flight_ids()

        key_limits = declared_key_limits(self.queue.tasks.values(), self.queues)
        refresh = self.poll_interval / 2
        pauses = Pauses(
            sql, self.queues, wakeups, refresh_interval=refresh, outage=outage, declared=key_limits
        )
        fetch_connect = connector(self.queue, connection_name("fetcher", self.id))
        columns = {"traced": traced, "checkpoint": handlers is not None}  # claimed besides
        claims = Claims(
            fetch_connect, sql, pauses, self.id, completer, held_ids, wakeups, leases, **columns
        )
        controls = Controls(sql, pauses, dispatcher)  # what the listener hears but wake-ups
        listening = self.listen and not burst
        listener = self._make_listener(wakeups, controls, outage) if listening else None
        awake = AwakeRole(
            listener, pool, sql, claims, wakeups, self.queues, drain_timeout=self.poll_interval
        )
        fetcher: FetchLoop
        if self.hold_transaction:
            fetcher = HoldingFetcher(
                claims,
                dispatcher,
                sql,
                self.id,
                wakeups,
                awake,
                outage=outage,
                concurrency=self.concurrency,
                poll_interval=self.poll_interval,
            )
        else:
            fetcher = Fetcher(
                claims,
                dispatcher,
                completer,
                wakeups,
                awake,
                outage=outage,
                concurrency=self.concurrency,
                poll_interval=self.poll_interval,
                recheck_interval=self.recheck_interval,
            )
        self._fetcher, self._dispatcher, self._listener = fetcher, dispatcher, listener
        self._claims = claims
        if self._stop_requested:
            fetcher.stop()

        async with anyio.create_task_group() as services:
            if listener is not None:  # connects while the fetcher's connection is made
                services.start_soon(listener.run)
                services.start_soon(controls.run, pool)
            services.start_soon(claims.connect_ahead)  # the fetcher's connection likewise
            if listener is not None:
                # Ready once listening: a job enqueued just after is woken by NOTIFY, and
                # the start statement's read sees every pause sent before (one read).
                with anyio.move_on_after(5):
                    await listener.connected.wait()
            # Listed in the registry from the start, not from the first heartbeat.
            await start_worker(pool, sql, self.queue.tasks, presence, pauses)
            logger.info(
                "worker %s started on queues %s",
                self.id,
                ",".join(self.queues),
                extra={"worker": self.id, "queues": self.queues},
            )
            await prepare_key_limits(pool, sql, key_limits, self.id)
            services.start_soon(completer.run)
            beat = (pool, sql, self.id, held_ids, self.heartbeat_interval, dispatcher.cancel)
            services.start_soon(run_heartbeat, *beat, leases, progress, presence, outage)
            if not self.hold_transaction:  # held rows cannot be rescued: nothing to fence
                vt, hb = self.visibility_timeout, self.heartbeat_interval
                services.start_soon(run_fence, leases, dispatcher.running, dispatcher.fence, vt, hb)
            services.start_soon(self._maintain, pool, outage)
            services.start_soon(pauses.run, pool)
            if self.metrics_port is not None:
                await self._start_metrics(services, pool)
            schedules = [s for s in self.queue.schedules.values() if s.queue_name in self.queues]
            if self.periodic and schedules and not burst:
                scheduler = Scheduler(
                    pool, sql, schedules, self.id, interval=self.maintenance_interval, outage=outage
                )
                services.start_soon(scheduler.run)
            if self.blocked_loop_warning:
                watchdog = LoopWatchdog(self.blocked_loop_warning, dispatcher.running.get)
                services.start_soon(watchdog.run)
            task_status.started()
            try:
                grace, stopping = self.grace_period, (fetcher, claims, dispatcher)
                await fetch_until_stopped(*stopping, grace_period=grace, burst=burst)
            finally:
                # Also on cancellation: commit what finished, so it does not run again.
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await completer.wait_idle()
                services.cancel_scope.cancel()
        logger.info("worker %s stopped", self.id, extra={"worker": self.id})

    async def _start_metrics(self, services: TaskGroup, pool: asyncpg.Pool) -> None:
        from .exposition import MetricsServer  # prometheus-client: the `metrics` extra

        assert self.metrics_port is not None
        server = MetricsServer(
            pool,
            self.queue.sql,
            host=self.metrics_host,
            port=self.metrics_port,
            registry=self._metrics_registry,
        )
        self.serving_metrics_port = await services.start(server.run)

    async def _maintain(self, pool: asyncpg.Pool, outage: Outage) -> None:
        await run_maintenance(
            pool,
            self.queue.sql,
            outage=outage,
            interval=self.maintenance_interval,
            visibility_timeout=self.visibility_timeout,
            retention=options.retention_by_status(
                self.retention, self.failed_retention, self.cancelled_retention
            ),
        )

    def _make_listener(self, wakeups: Wakeups, controls: Controls, outage: Outage) -> Listener:
        connect = connector(self.queue, self.listener_name, self.listen_dsn)
        return Listener(
            connect, self.queue.sql, self.queues, wakeups, controls=controls, outage=outage
        )

    # -- running in the background of an asyncio service ---------------------------

    async def __aenter__(self) -> Worker:
        self._background = anyio.create_task_group()
        await self._background.__aenter__()
        try:
            await self._background.start(
                lambda task_status: self._run(burst=False, task_status=task_status)
            )
        except BaseException:
            await self._background.__aexit__(None, None, None)
            self._background = None
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self.stop()
        assert self._background is not None
        background, self._background = self._background, None
        return await background.__aexit__(exc_type, exc, tb)


def _schema_refused(exc: Exception) -> SchemaError | None:
    """The SchemaError that a task group raised alone, wrapped in its ExceptionGroup."""
    members = getattr(exc, "exceptions", None)
    if isinstance(members, tuple) and len(members) == 1 and isinstance(members[0], SchemaError):
        return members[0]
    return None
