"""``aiopgq server``: a persistent embedded PostgreSQL in the foreground, and what to paste."""

from __future__ import annotations

import pwd
import signal
import sys
import threading
from pathlib import Path

from .._errors import EmbeddedServerError
from .data import fallback_note
from .running import DEFAULT_PORT, export_line, recorded_port, running_server
from .server import EmbeddedServer, persistent_data_dir, start_persistent

_STOP_ON = (signal.SIGINT, signal.SIGTERM)


def serve_forever(data_dir: Path | None, port: int | None) -> int:
    """Run a persistent server until SIGINT or SIGTERM; ``aiopgq server`` calls this.

    ``data_dir`` None: the folder the demo uses too (`persistent_data_dir`: usable as
    root). ``port`` None: the folder's last port, else 5433, else a free one. Prints the
    port, the folder, who can connect and an ``export AIOPGQ_DSN=...`` line to paste;
    returns the exit code.

        raise SystemExit(serve_forever(None, None))

    Args:
        data_dir: the data folder, or None as above.
        port: the server's port number, or None as above.

    Returns:
        The exit code: 0 after a signal, 1 when the server could not start or exited.
    """
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_ON}
    try:
        try:
            server = _start(data_dir, port)
        except EmbeddedServerError as exc:
            print(f"aiopgq server: {exc}", file=sys.stderr)
            return 1
        if server is None:
            return 1
        with server:
            print("\nPoint aiopgq at it, in the shell where you run your code:\n")
            print(export_line(server.dsn))
            print("\nStop with Ctrl-C.", flush=True)
            while not stop.wait(0.5):
                if not server.running():
                    print(f"aiopgq server: PostgreSQL exited; see {server.log_path}")
                    return 1
        return 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _start(data_dir: Path | None, port: int | None) -> EmbeddedServer | None:
    """Start the server and say where and why there; None (having said why) when another
    server runs on the folder already."""
    replaced = None
    if data_dir is None:
        data_dir, replaced = persistent_data_dir()
    data_dir = data_dir.expanduser().absolute()
    running = running_server(data_dir)
    if running is not None:
        print(
            f"aiopgq server: PostgreSQL already runs on data folder {data_dir} (pid "
            f"{running.pid}, port {running.port}), started by another `aiopgq server` or "
            f"`aiopgq demo`. Use it:\n\n{export_line(running.dsn)}\n\nor stop it first.",
            file=sys.stderr,
        )
        return None
    recorded = recorded_port(data_dir)
    server = start_persistent(data_dir, port=port)
    why = _why_this_port(server.port, port, recorded)
    print(f"PostgreSQL {server.major} is ready on port {server.port} ({why}).")
    print(f"data folder: {server.data_dir}")
    if replaced is not None:
        print(f"  ({fallback_note(data_dir, replaced)})")
    print(f"log: {server.log_path}")
    print(who_can_connect(server.socket_dir), flush=True)
    return server


def who_can_connect(socket_dir: str) -> str:
    """Who can open the server's socket, the only way in: the folder's owner, and root."""
    owner = Path(socket_dir).stat().st_uid
    accounts = " and root" if owner != 0 else ""
    return (
        f"who can connect: {_account_name(owner)}{accounts} only, as superuser postgres with "
        f"no password, through the Unix socket in {socket_dir} (mode 0700; no TCP port). "
        "Other local users are refused."
    )


def _account_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _why_this_port(port: int, asked: int | None, recorded: int | None) -> str:
    if asked is not None:
        return "--port"
    if port == recorded:
        return "this data folder's port at its last start"
    if port == DEFAULT_PORT:
        return "the default"
    taken = sorted({DEFAULT_PORT, recorded or DEFAULT_PORT})
    return f"a free one: {' and '.join(map(str, taken))} in use; --port picks one"
