"""The dashboard's actions (retry, cancel, pause, resume), each refused without the token.

The token travels in an `Authorization: Bearer` header (what the page's script sends)
or a `token` form field, never in a cookie: a page of another site can make the browser
post a form here, but cannot know the token to put in it (no CSRF).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse

from aiopgq import Error, JobNotFound, Queue
from aiopgq._display import shown

from .settings import TOKEN_ENV, Settings

logger = logging.getLogger("aiopgq.dashboard")

_MAX_BODY = 4096  # an action's form: a token and a queue name


# An action's body: (the queue, the form's fields) -> (whether it did it, what to say).
Act = Callable[[Queue, dict[str, str]], Awaitable[tuple[bool, str]]]


class Refused(Exception):
    """An action that is not allowed or not understood: (HTTP status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Actions:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def retry_job(self, request: Request) -> JSONResponse:
        async def act(queue: Queue, form: dict[str, str]) -> tuple[bool, str]:
            job_id: int = request.path_params["job_id"]
            if await queue.retry(job_id):
                return True, f"job {job_id} re-queued"
            job = await queue.get_job(job_id, preview=True)
            if job.status.value in ("failed", "cancelled"):
                return False, f"job {job_id} not re-queued: a live job holds its idempotency key"
            return False, f"job {job_id} is {job.status.value}: only failed or cancelled jobs retry"

        return await self._run(request, "retry", act)

    async def cancel_job(self, request: Request) -> JSONResponse:
        async def act(queue: Queue, form: dict[str, str]) -> tuple[bool, str]:
            job_id: int = request.path_params["job_id"]
            if await queue.cancel(job_id):
                return True, f"job {job_id} cancelled"
            job = await queue.get_job(job_id, preview=True)
            return False, f"job {job_id} is {job.status.value} already: nothing to cancel"

        return await self._run(request, "cancel", act)

    async def pause(self, request: Request) -> JSONResponse:
        async def act(queue: Queue, form: dict[str, str]) -> tuple[bool, str]:
            name = _queue_name(form)
            await queue.pause(name)
            return True, f"queue {name} paused: workers finish what they run and claim no more"

        return await self._run(request, "pause", act)

    async def resume(self, request: Request) -> JSONResponse:
        async def act(queue: Queue, form: dict[str, str]) -> tuple[bool, str]:
            name = _queue_name(form)
            await queue.resume(name)
            return True, f"queue {name} resumed"

        return await self._run(request, "resume", act)

    async def retry_failed(self, request: Request) -> JSONResponse:
        async def act(queue: Queue, form: dict[str, str]) -> tuple[bool, str]:
            name = _queue_name(form)
            count = await queue.retry_failed(queue=name)
            return True, f"{count} failed job{'' if count == 1 else 's'} of {name} re-queued"

        return await self._run(request, "retry-failed", act)

    async def _run(self, request: Request, action: str, act: Act) -> JSONResponse:
        try:
            form = await self._authorized_form(request)
            queue = await self.settings.open_queue()
            ok, message = await act(queue, form)
        except Refused as exc:
            logger.warning(
                "%s refused: %s",
                action,
                exc,
                extra={"action": action, "client": _client(request), "status": exc.status},
            )
            return JSONResponse({"ok": False, "message": str(exc)}, exc.status)
        except JobNotFound as exc:
            return JSONResponse({"ok": False, "message": str(exc)}, 404)
        except ValueError as exc:
            return JSONResponse({"ok": False, "message": str(exc)}, 400)
        except (Error, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            logger.warning("%s failed: %s", action, exc, extra={"action": action})
            return JSONResponse({"ok": False, "message": f"{action} failed: {exc}"}, 503)
        client = _client(request)
        logger.info(
            "%s from %s: %s", action, client, message, extra={"action": action, "client": client}
        )
        return JSONResponse({"ok": ok, "message": message})

    async def _authorized_form(self, request: Request) -> dict[str, str]:
        """The request's form fields, once its token checks out; else Refused."""
        if self.settings.read_only:
            raise Refused(403, "this dashboard is read-only: actions are switched off")
        if self.settings.token is None:
            raise Refused(
                403,
                "this dashboard is read-only: start it with --token or "
                f"{TOKEN_ENV} (create_app(..., token=...)) to allow actions",
            )
        # The header's token and the declared length are checked before any of the body
        # is read, and at most _MAX_BODY bytes of it ever are.
        header = _bearer(request)
        if header:
            self._check_token(header)
        body = await _capped_body(request)
        try:
            fields = parse_qs(body.decode(), max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            raise Refused(400, "the action's form is not URL-encoded text") from None
        form = {name: values[-1] for name, values in fields.items()}
        if not header:
            self._check_token(form.get("token", ""))
        return form

    def _check_token(self, given: str) -> None:
        assert self.settings.token is not None
        if not given:
            raise Refused(401, "this action needs the dashboard token: enter it at the top right")
        if not hmac.compare_digest(given.encode(), self.settings.token.encode()):
            raise Refused(401, "wrong dashboard token: check it at the top right")


async def _capped_body(request: Request) -> bytes:
    """The request's body, refused (413) past _MAX_BODY bytes, declared or streamed."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise Refused(400, f"Content-Length must be a number of bytes, got {shown(declared)}")
        if int(declared) > _MAX_BODY:
            raise Refused(413, f"an action's form is at most {_MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_BODY:
            raise Refused(413, f"an action's form is at most {_MAX_BODY} bytes")
    return bytes(body)


def _bearer(request: Request) -> str:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _queue_name(form: dict[str, str]) -> str:
    name = form.get("queue", "")
    if not name:
        raise Refused(400, "name the queue: a form field `queue`")
    return name


def _client(request: Request) -> str:
    return request.client.host if request.client else "-"
