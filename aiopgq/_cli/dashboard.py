"""`aiopgq dashboard`: serve the web dashboard (the `dashboard` extra) for one schema."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

from .common import AddCommand, UsageError, queue_of

_LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1", "[::1]"]


def register(add: AddCommand) -> None:
    dashboard = add(
        "dashboard", "serve the web dashboard: queues, jobs, retry, cancel, pause and resume"
    )
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (127.0.0.1: this machine only)"
    )
    dashboard.add_argument("--port", type=int, default=8080, metavar="PORT", help="port")
    dashboard.add_argument(
        "--token",
        help="the token that actions need (default: $AIOPGQ_DASHBOARD_TOKEN, which other "
        "users cannot see in `ps`); without one the dashboard is read-only",
    )
    dashboard.add_argument(
        "--read-only", action="store_true", help="refuse every action, even with a token"
    )
    dashboard.add_argument(
        "--require-token-for-reads",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pages need the token too (the browser asks for it as a password); default: "
        "on when --host is not a loopback address, off on 127.0.0.1",
    )
    dashboard.add_argument(
        "--poll-interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="time between the pages' refreshes",
    )
    dashboard.set_defaults(run=serve)


async def serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        from ..dashboard import TOKEN_ENV, create_app
    except ImportError as exc:
        raise UsageError(
            f"{exc} (the dashboard is an extra: pip install -e '.[dashboard]' in the aiopgq clone)"
        ) from None
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be 1-65535, got {args.port}")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    loopback = _is_loopback(args.host)
    guarded = not loopback if args.require_token_for_reads is None else args.require_token_for_reads
    if guarded and token is None:
        raise UsageError(
            f"--host {args.host} serves beyond this machine, so reads need the token: set "
            f"{TOKEN_ENV} (or --token), or pass --no-require-token-for-reads to let anyone "
            f"who reaches {args.host}:{args.port} read every job's payload"
            if args.require_token_for_reads is None
            else f"--require-token-for-reads needs a token: set {TOKEN_ENV} (or --token)"
        )
    async with queue_of(args) as queue:
        await queue.check_schema()
        app: Any = create_app(
            queue,
            token=token,
            read_only=args.read_only,
            poll_interval=args.poll_interval,
            require_token_for_reads=guarded,
        )
        if _is_loopback(args.host):
            # Bound to this machine: answer only requests addressed to it, so that a web
            # page whose name is re-pointed at 127.0.0.1 (DNS rebinding) cannot read it.
            app = TrustedHostMiddleware(app, allowed_hosts=_LOOPBACK_NAMES)
        mode = "read-only" if args.read_only or token is None else "actions need the token"
        where = f"[{args.host}]" if ":" in args.host else args.host
        print(f"aiopgq dashboard for schema {queue.schema}: http://{where}:{args.port}/ ({mode})")
        if token is None and not args.read_only:
            print(f"  read-only: set {TOKEN_ENV} (or --token) to allow retry/cancel/pause/resume")
        if guarded:
            print("  reads need the token too: the browser asks for it as the password")
        else:
            _warn_open_reads(args.host, args.port, loopback)
        config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level="warning", lifespan="off"
        )
        await _server_class()(config).serve()
    return 0


def _warn_open_reads(host: str, port: int, loopback: bool) -> None:
    who = (
        "every user of this machine"
        if loopback
        else f"anyone who reaches {host}:{port} (other machines included)"
    )
    message = (
        f"warning: reads need no token: {who} can read every job's payload and result; "
        "pass --require-token-for-reads (with a token) to close them"
    )
    print(message, file=sys.stderr, flush=True)


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, stopped by SIGINT or SIGTERM with exit status 0 like `aiopgq
        worker` (uvicorn itself raises the signal again once it has shut down)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, self.handle_exit, signum, None)
            try:
                yield
            finally:
                for signum in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(signum)

    return Server


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
