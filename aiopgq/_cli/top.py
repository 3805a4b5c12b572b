"""`aiopgq top`: a live view of the queues and the workers (rich; the `ops` extra).

Refreshes every second; q, Ctrl-C or SIGTERM quits and gives the terminal back as it
was. `--once` prints one frame (for scripts and when not on a terminal).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import asyncpg

from .._db.dsn import redact
from .._db.migrations import check_version
from .._ops.queries import OpsStatements
from .._ops.snapshot import Snapshot, Watcher
from .common import AddCommand, UsageError, dsn_of, schema_of
from .workers import age

if TYPE_CHECKING:
    from rich.console import Group

_PIPE_WIDTH = 140


def register(add: AddCommand) -> None:
    top = add("top", "live view of the queues and workers (q or Ctrl-C quits)")
    top.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="time between refreshes"
    )
    top.add_argument(
        "--window",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the recent past over which rates are measured",
    )
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.set_defaults(run=top_run)


async def top_run(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        raise UsageError(
            "aiopgq top needs rich: pip install -e '.[ops]' in the aiopgq clone"
        ) from None
    if args.interval <= 0 or args.window <= 0:
        raise UsageError("--interval and --window must be positive seconds")
    dsn, schema = dsn_of(args), schema_of(args)
    watcher = Watcher(OpsStatements(schema), window=args.window)
    conn = await asyncpg.connect(dsn, server_settings={"application_name": "aiopgq top"})
    title = f"aiopgq top: schema {schema} on {redact(dsn)}"
    try:
        await check_version(conn, schema)  # "run `aiopgq migrate`", not a missing relation
        if args.once:  # not on a terminal (a pipe, a file): wide enough for worker ids
            console = Console() if sys.stdout.isatty() else Console(width=_PIPE_WIDTH)
            console.print(render(title, await watcher.snapshot(conn), args.window))
            return 0
        quit_ = asyncio.Event()
        with _keys(quit_), Live(console=Console(), screen=True, auto_refresh=False) as live:
            while not quit_.is_set():
                try:
                    frame = render(title, await watcher.snapshot(conn), args.window)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    frame = _trouble(title, exc)
                    conn = await _reconnect(conn, dsn)
                live.update(frame, refresh=True)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(quit_.wait(), args.interval)
    finally:
        await conn.close()
    return 0


async def _reconnect(conn: asyncpg.Connection, dsn: str) -> asyncpg.Connection:
    if not conn.is_closed():
        return conn
    try:
        return await asyncpg.connect(dsn, server_settings={"application_name": "aiopgq top"})
    except (OSError, asyncpg.PostgresError):
        return conn  # still down: the next refresh tries again


@contextlib.contextmanager
def _keys(quit_: asyncio.Event) -> Iterator[None]:
    """q quits (the terminal in cbreak mode: keys without Enter, no echo); Ctrl-C and
    SIGTERM quit too. The terminal's settings come back on the way out."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, quit_.set)
    fd = sys.stdin.fileno()
    saved: list[Any] | None = None
    if os.isatty(fd):
        import termios
        import tty

        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)

        def on_key() -> None:
            if b"q" in os.read(fd, 64).lower():
                quit_.set()

        loop.add_reader(fd, on_key)
    try:
        yield
    finally:
        if saved is not None:
            import termios

            loop.remove_reader(fd)
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def render(title: str, snapshot: Snapshot, window: float) -> Group:
    """One frame: the queues, then the workers."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    stamp = time.strftime("%H:%M:%S", time.localtime(snapshot.taken_at))
    head = Text.assemble((title, "bold"), f"  {stamp}  (q quits)")
    queues = Table(
        title=f"queues (failed and rates over {window:g} s)", title_justify="left", expand=True
    )
    columns = ("queue", "pending", "scheduled", "running", "failed", "in/s", "out/s", "paused")
    for column in columns:
        queues.add_column(column, justify="left" if column == "queue" else "right")
    queues.add_column("oldest runnable", justify="right")
    for q in snapshot.queues:
        oldest = q.oldest_runnable_age
        queues.add_row(
            q.queue,
            str(q.runnable),
            str(q.scheduled),
            str(q.running),
            Text(str(q.failed), style="red" if q.failed else ""),
            f"{q.rate_in:.1f}",
            f"{q.rate_out:.1f}",
            Text("paused", style="yellow") if q.paused else "",
            Text(age(oldest), style="yellow" if oldest and oldest > 10 else ""),
        )
    if not snapshot.queues:
        queues.add_row("(no jobs)", *[""] * 8)
    workers = Table(title="workers", title_justify="left", expand=True)
    for column in ("worker", "host", "pid", "queues", "running", "version", "up", "seen"):
        right = column in ("pid", "running", "up", "seen")
        workers.add_column(column, justify="right" if right else "left", no_wrap=column == "worker")
    for w in snapshot.workers:
        late = w.last_seen_age > 2 * w.heartbeat_interval
        workers.add_row(
            w.id,
            w.host,
            str(w.pid),
            ",".join(w.queues),
            f"{w.running}/{w.concurrency}",
            w.version,
            age(w.uptime),
            Text(age(w.last_seen_age) + " ago", style="yellow" if late else ""),
        )
    if not snapshot.workers:
        workers.add_row("(no workers)", *[""] * 7)
    return Group(head, queues, workers)


def _trouble(title: str, exc: BaseException) -> Group:
    from rich.console import Group
    from rich.text import Text

    reason = redact(str(exc)) or type(exc).__name__
    return Group(Text(title, style="bold"), Text(f"cannot read the queue ({reason}); retrying"))
