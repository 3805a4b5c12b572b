"""Worker processes under a supervisor: N `python -m aiopgq worker` children, restarted.

Children are separate interpreters started through the CLI, not forks or
multiprocessing workers: each imports the application and builds its Queue itself
(nothing is pickled, no pool or event loop crosses a fork), runs exactly what a
single `aiopgq worker` runs, and can crash (a segfaulting extension, SIGKILL by the
OOM killer) without touching its siblings. The supervisor holds no connection and
no job: it starts children, restarts a child that died (backing off when one keeps
dying young), and forwards a stop.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from .._db.dsn import redact
from .._errors import ConfigurationError, shown

logger = logging.getLogger("aiopgq.supervisor")

# A child that lived this long was healthy: its next restart comes at once again.
_HEALTHY_AFTER = 30.0
_FIRST_DELAY, _MAX_DELAY = 0.5, 30.0
# After the grace period, children still running get this long before SIGKILL.
_KILL_MARGIN = 10.0
_USAGE_ERROR = 2  # the CLI's exit status for a bad command line
# Database URLs reach the children in their environment, never on their command line:
# every local user can read a command line (ps, /proc/PID/cmdline), an environment only
# the same user and root. The worker takes DSN_VARIABLE as it takes --dsn (it overrides
# the Queue's own DSN, where AIOPGQ_DSN only fills in a missing one).
DSN_VARIABLE = "AIOPGQ_SUPERVISED_DSN"
LISTEN_DSN_VARIABLE = "AIOPGQ_LISTEN_DSN"


def process_count(processes: int | str) -> int:
    """`processes` as a number: an int >= 1, or "auto" for the CPUs this process may use."""
    if processes == "auto":
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    try:
        count = int(processes)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise ConfigurationError(f"processes must be an int >= 1 or 'auto', got {shown(processes)}")
    return count


def check_target(target: str) -> None:
    """Import MODULE:ATTRIBUTE here, so a typo fails once, not in every child forever."""
    from .contracts import is_queue

    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"worker target {shown(target)} must look like MODULE:QUEUE, e.g. myapp.jobs:queue"
        )
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, ".")  # as the CLI does: the application's folder
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import module {shown(module_name)}: {exc}") from None
    if not is_queue(getattr(module, attribute, None)):
        raise ConfigurationError(
            f"{target}: {attribute!r} is not an aiopgq.Queue in module {module_name}"
        )


def _die_with_parent() -> None:
    """In the child, before exec: stop gracefully (SIGTERM) when the supervisor dies."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class WorkerProcesses:
    """N worker processes of one application, each restarted when it dies.

    >>> processes = WorkerProcesses("app:queue", 4, args=["--concurrency", "50"])
    >>> exit_code = await processes.run()   # processes.stop() from a signal handler

    `args` are `aiopgq worker` options for every child; `dsn` and `listen_dsn` (as
    --dsn and --listen-dsn) reach them through the environment. `stop()` sends SIGTERM to every
    child (a graceful stop within its grace period); a second `stop()` sends another
    SIGTERM, which makes the children abort (running jobs go back to pending). A child
    still alive `grace_period` + 10 s after the first stop is killed.

    Args:
        target: where the Queue is, "module:attribute" (as `aiopgq worker TARGET`).
        processes: how many children, an int >= 1 or "auto" (default: one per CPU this
            process may use).
        args: `aiopgq worker` options for every child (default none).
        grace_period: seconds a child has to stop gracefully; it is killed 10 s later
            (default 30; pass the children's own `--grace-period` too).
        burst: True: each child stops once it finds no runnable job (default False).
        env: the children's environment (default None: this process's).
        dsn: the database's URL, passed to the children as --dsn would be (default None).
        listen_dsn: the LISTEN connections' direct address, as --listen-dsn (default None).

    Raises:
        ConfigurationError: `processes` is not an int >= 1 or "auto".
    """

    def __init__(
        self,
        target: str,
        processes: int | str = "auto",
        *,
        args: Sequence[str] = (),
        grace_period: float = 30.0,
        burst: bool = False,
        env: Mapping[str, str] | None = None,
        dsn: str | None = None,
        listen_dsn: str | None = None,
    ) -> None:
        self.target = target
        self.count = process_count(processes)
        self.args = [*args, *(["--burst"] if burst else [])]
        self.grace_period = grace_period
        self.burst = burst
        self.env = dict(env) if env is not None else None
        self._secrets = {
            name: value
            for name, value in ((DSN_VARIABLE, dsn), (LISTEN_DSN_VARIABLE, listen_dsn))
            if value
        }
        self.restarts = 0
        self._children: dict[int, asyncio.subprocess.Process] = {}  # slot -> child
        self._stops = 0
        self._refused = False  # a child exited with a usage error
        self._stopped = asyncio.Event()

    @property
    def pids(self) -> list[int]:
        """Process ids of the children running now, by slot."""
        return [p.pid for _, p in sorted(self._children.items()) if p.returncode is None]

    @property
    def command(self) -> list[str]:
        """The command line each worker process runs: `python -m aiopgq worker TARGET ARGS`."""
        return [sys.executable, "-m", "aiopgq", "worker", self.target, *self.args]

    def _child_env(self) -> dict[str, str] | None:
        if not self._secrets:
            return self.env  # None: the children inherit ours
        return {**(self.env if self.env is not None else os.environ), **self._secrets}

    def stop(self) -> None:
        """First call: stop gracefully. Second call: abort."""
        self._stops += 1
        self._stopped.set()
        verb = "stopping gracefully" if self._stops == 1 else "aborting"
        logger.warning("%s %d worker processes", verb, len(self.pids), extra={"pids": self.pids})
        self._signal_children(signal.SIGTERM)

    def _signal_children(self, signum: int) -> None:
        for child in self._children.values():
            if child.returncode is None:
                try:
                    child.send_signal(signum)
                except ProcessLookupError:
                    pass

    async def run(self) -> int:
        """Run the children until stop() (or, with burst, until each finds no work).

        Returns 0 when every child ended cleanly, 2 when a child refused its command line
        (nothing is restarted then), 130 after an abort, 1 otherwise.

        Returns:
            The exit code: 0, 1, 2 or 130, as above.
        """
        shown = redact(" ".join(self.command[2:]))  # args may carry a URL the caller wrote
        logger.info("starting %d worker processes: %s", self.count, shown)
        codes = await asyncio.gather(*(self._keep(slot) for slot in range(self.count)))
        if self._refused:
            return _USAGE_ERROR
        if self._stops > 1:
            return 130
        return 0 if all(code == 0 for code in codes) else 1

    async def _keep(self, slot: int) -> int | None:
        """Run slot's child, restarting it with backoff, until stopped; its last exit code."""
        delay = _FIRST_DELAY
        while True:
            started = time.monotonic()
            child = await asyncio.create_subprocess_exec(
                *self.command,
                env=self._child_env(),
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C reaches us; we forward one stop
                preexec_fn=_die_with_parent,
            )
            self._children[slot] = child
            if self._stopped.is_set():  # a stop came while it was starting
                child.send_signal(signal.SIGTERM)
            logger.info("worker process %d started (pid %d)", slot, child.pid)
            code = await self._wait(child)
            if self._stopped.is_set() or (self.burst and code == 0):
                return code
            if code == _USAGE_ERROR:  # a bad option: every restart would fail the same way
                logger.error(
                    "worker process %d (pid %d) refused its command line (exit 2): stopping all",
                    slot,
                    child.pid,
                )
                self._refused = True
                self.stop()
                return code
            lived = time.monotonic() - started
            delay = _FIRST_DELAY if lived >= _HEALTHY_AFTER else delay
            self.restarts += 1
            logger.warning(
                "worker process %d (pid %d) exited with %s after %.1f s; restarting in %.1f s",
                slot,
                child.pid,
                _describe(code),
                lived,
                delay,
                extra={"pid": child.pid, "exit_code": code, "slot": slot},
            )
            try:
                await asyncio.wait_for(self._stopped.wait(), delay)
                return code  # stopped while backing off: no restart
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, _MAX_DELAY)

    async def _wait(self, child: asyncio.subprocess.Process) -> int:
        """The child's exit code; SIGKILL it if it outlives a stop by grace + margin."""
        waiting = asyncio.ensure_future(child.wait())
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                try:
                    return await asyncio.wait_for(
                        asyncio.shield(waiting), self.grace_period + _KILL_MARGIN
                    )
                except asyncio.TimeoutError:
                    logger.error(
                        "worker process pid %d still running %.0f s after the stop: killing it",
                        child.pid,
                        self.grace_period + _KILL_MARGIN,
                    )
                    child.kill()
            return await waiting
        finally:
            stopped.cancel()


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


# Worker options of run_workers that `aiopgq worker` takes as `--name-with-dashes VALUE`.
_VALUED = frozenset(
    {
        "queues",
        "concurrency",
        "poll_interval",
        "recheck_interval",
        "heartbeat_interval",
        "visibility_timeout",
        "grace_period",
        "completion_interval",
        "completion_batch_size",
        "maintenance_interval",
        "blocked_loop_warning",
        "connect_timeout",
        "retention",
        "failed_retention",
        "cancelled_retention",
        "max_pool_size",
        "statement_cache_size",
        "schema",
    }
)
# Options that go to the children's environment, not their command line (DSN_VARIABLE).
_SECRETS = frozenset({"dsn", "listen_dsn"})
_KEEP_WHEN_NONE = frozenset({"retention", "failed_retention", "cancelled_retention"})


def worker_args(options: Mapping[str, Any]) -> list[str]:
    """`aiopgq worker` flags for worker options given as keywords (but dsn and listen_dsn,
    which WorkerProcesses passes in the environment)."""
    args: list[str] = []
    for name, value in options.items():
        if name in _SECRETS:
            continue
        flag = "--" + name.replace("_", "-")
        if name == "listen":
            args += [] if value else ["--no-listen"]
        elif name == "hold_transaction":
            args += [flag] if value else []
        elif name not in _VALUED:
            known = ", ".join(sorted(_VALUED | _SECRETS | {"listen", "hold_transaction"}))
            raise ConfigurationError(f"run_workers() got an unknown option {name!r}: use {known}")
        elif value is None:
            args += [flag, "none"] if name in _KEEP_WHEN_NONE else []  # keep those rows
        else:
            if isinstance(value, timedelta):
                value = value.total_seconds()
            elif name == "queues" and not isinstance(value, str):
                value = ",".join(value)
            args += [flag, str(value)]
    return args


def run_workers(
    target: str, *, processes: int | str = "auto", burst: bool = False, **options: Any
) -> int:
    """Run worker processes of the Queue at `target` ("module:attribute") until SIGINT or
    SIGTERM (a second one aborts); a crashed process is restarted. Returns an exit code.

    >>> import aiopgq
    >>> raise SystemExit(aiopgq.run_workers("app:queue", processes=4, concurrency=50))

    `options` are the worker's (concurrency, queues, listen_dsn, ...); each process is
    `python -m aiopgq worker target ...`. Call it from the main thread.

    Args:
        target: where the Queue is, "module:attribute".
        processes: how many processes, an int >= 1 or "auto" (default: one per CPU).
        burst: True: each process stops once it finds no runnable job (default False).
        **options: the Worker's keyword arguments (durations in seconds or timedeltas),
            and `dsn`, `listen_dsn`, passed to the processes in their environment.

    Returns:
        The exit code, as `WorkerProcesses.run` returns it.

    Raises:
        ConfigurationError: an unknown option, a bad `processes`, or a `target` that is
            not "module:attribute", cannot be imported or is not an aiopgq.Queue.
    """
    args = worker_args(options)  # bad options fail before anything is imported
    count = process_count(processes)
    check_target(target)
    grace = options.get("grace_period", 30.0)
    grace_period = grace.total_seconds() if isinstance(grace, timedelta) else float(grace)
    supervisor = WorkerProcesses(
        target,
        count,
        args=args,
        grace_period=grace_period,
        burst=burst,
        dsn=options.get("dsn"),
        listen_dsn=options.get("listen_dsn"),
    )
    return asyncio.run(serve(supervisor))


async def serve(supervisor: WorkerProcesses) -> int:
    """Run `supervisor` with SIGINT and SIGTERM handlers that stop it (main thread only)."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, supervisor.stop)
    try:
        return await supervisor.run()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
