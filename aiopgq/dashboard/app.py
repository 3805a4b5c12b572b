"""The dashboard's ASGI app: its settings, routes and security headers."""

from __future__ import annotations

import math
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aiopgq import Queue

from .actions import Actions
from .pages import Pages
from .render import Templates
from .settings import TOKEN_ENV, Settings

__all__ = ["TOKEN_ENV", "create_app"]

STATIC = Path(__file__).resolve().parent / "static"

# Everything the pages load comes from the app itself: no inline script, no CDN, and
# no framing by another site (clickjacking the action buttons).
_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def create_app(
    queue: Queue,
    *,
    token: str | None = None,
    read_only: bool = False,
    poll_interval: float = 2.0,
    window: float = 60.0,
    require_token_for_reads: bool = False,
) -> Starlette:
    """The dashboard as an ASGI app, to serve or to mount in your own Starlette/FastAPI app.

    Actions (retry, cancel, pause, resume) need `token`, sent by the page in an
    Authorization header (never a cookie, so another site cannot make the browser send
    it). Without a token, or with `read_only=True`, actions are refused. Reading needs
    nothing unless `require_token_for_reads=True`: then pages answer 401 with an HTTP
    Basic challenge, the browser asks for a password (the token; any user name) and
    sends it with every request of the page. It is off by default here because a host
    app usually has its own login; turn it on when nothing else guards the mount.
    Pages refresh every `poll_interval` seconds; rates cover `window` seconds.
    The app opens the queue on its first request if it is not open; closing it is yours.

    >>> app = FastAPI(lifespan=...)  # your app, which opens and closes `queue`
    >>> app.mount("/queue", create_app(queue, token=os.environ["AIOPGQ_DASHBOARD_TOKEN"]))
    """
    if not isinstance(queue, Queue):
        raise TypeError(f"create_app needs an aiopgq.Queue, got {queue!r}")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ValueError("token must be a non-empty string (or None for a read-only dashboard)")
    for name, value in (("poll_interval", poll_interval), ("window", window)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be seconds (a number > 0), got {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be seconds > 0, got {value!r}")
    if require_token_for_reads and token is None:
        raise ValueError(
            "require_token_for_reads=True needs a token: pass token=... (the password the "
            "browser asks for)"
        )
    settings = Settings(
        queue, token, read_only, float(poll_interval), float(window), require_token_for_reads
    )
    templates = Templates(settings)
    pages, actions = Pages(settings, templates), Actions(settings)
    routes: list[BaseRoute] = [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/jobs/{job_id:int}", pages.job, name="job"),
        Route("/workflows", pages.workflows, name="workflows"),
        Route("/workflows/{workflow_id:int}", pages.workflow, name="workflow"),
        Route("/api/jobs/{job_id:int}/retry", actions.retry_job, methods=["POST"]),
        Route("/api/jobs/{job_id:int}/cancel", actions.cancel_job, methods=["POST"]),
        Route("/api/queues/pause", actions.pause, methods=["POST"]),
        Route("/api/queues/resume", actions.resume, methods=["POST"]),
        Route("/api/queues/retry-failed", actions.retry_failed, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={404: pages.not_found},
    )


class SecurityHeaders:
    """Adds the headers above to every response of the dashboard (not to its host app's)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
