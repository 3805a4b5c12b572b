"""The dashboard's pages: the queues, a filtered list of jobs, one job in full, the
workflows and one workflow as a graph."""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import asyncpg
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from aiopgq import Error, JobNotFound, JobStatus, Queue, WorkflowNotFound
from aiopgq._display import shown

from .graph import draw, workflow_nodes
from .render import Templates, timeline
from .settings import Settings

logger = logging.getLogger("aiopgq.dashboard")

PAGE_SIZE = 50
_RECENT_FAILURES = 10
_MAX_FILTER = 200  # characters of a queue or task filter (queue names have at most 200)

Reader = Callable[[Queue], Awaitable[dict[str, Any]]]


class BadRequest(Exception):
    """A query parameter the page cannot use; the message says which and why."""


class Pages:
    def __init__(self, settings: Settings, templates: Templates) -> None:
        self.settings = settings
        self.templates = templates

    async def overview(self, request: Request) -> Response:
        """Every queue: depth, rates, pause state; and the latest failed jobs."""

        async def read(queue: Queue) -> dict[str, Any]:
            return {
                "stats": await queue.queue_stats(window=self.settings.window),
                "failed": await queue.latest_failures(_RECENT_FAILURES, preview=True),
            }

        return await self._show(request, "overview", "Queues", read)

    async def jobs(self, request: Request) -> Response:
        """The newest jobs of a status, queue and task (each optional), a page at a time."""

        async def read(queue: Queue) -> dict[str, Any]:
            filters = _filters(request)
            found = await queue.list_jobs(limit=PAGE_SIZE, preview=True, **filters)
            known = []
            if request.headers.get("x-aiopgq-live") != "1":  # the filter form's suggestions
                known = [q.queue for q in await queue.queue_stats(window=self.settings.window)]
            unpaged = {name: value for name, value in filters.items() if name != "before"}
            return {
                "jobs": found,
                "filters": filters,
                "known_queues": known,
                "newest": urlencode(unpaged) if "before" in filters else None,
                "older": (
                    urlencode({**unpaged, "before": found[-1].id})
                    if len(found) == PAGE_SIZE
                    else None
                ),
            }

        return await self._show(request, "jobs", "Jobs", read)

    async def job(self, request: Request) -> Response:
        """One job: its fields, payload, result, history, durable steps and errors."""
        job_id: int = request.path_params["job_id"]

        async def read(queue: Queue) -> dict[str, Any]:
            job = await queue.get_job(job_id, preview=True)
            steps = await queue.job_steps(job_id)  # durable steps and waits
            return {"job": job, "timeline": timeline(job), "steps": steps}

        return await self._show(request, "job", f"Job {job_id}", read)

    async def workflows(self, request: Request) -> Response:
        """The newest workflows with their status and counts."""

        async def read(queue: Queue) -> dict[str, Any]:
            return {"workflows": await queue.list_workflows(limit=PAGE_SIZE)}

        return await self._show(request, "workflows", "Workflows", read)

    async def workflow(self, request: Request) -> Response:
        """One workflow: its graph with each job's (or group's) status of the moment."""
        workflow_id: int = request.path_params["workflow_id"]

        async def read(queue: Queue) -> dict[str, Any]:
            workflow = await queue.get_workflow(workflow_id)
            base = request.scope.get("root_path", "").rstrip("/")
            return {"workflow": workflow, "graph": draw(workflow_nodes(workflow, base))}

        return await self._show(request, "workflow", f"Workflow {workflow_id}", read)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        detail = exc.detail if isinstance(exc, HTTPException) else "not found"
        return self._error(request, 404, f"{request.url.path}: {detail}")

    async def _show(self, request: Request, name: str, title: str, read: Reader) -> Response:
        if not self._may_read(request):
            response = self._error(
                request, 401, "this dashboard needs its token to be read: enter it as the password"
            )
            response.headers["www-authenticate"] = 'Basic realm="aiopgq dashboard", charset="UTF-8"'
            return response
        try:
            queue = await self.settings.open_queue()
            context = await read(queue)
        except BadRequest as exc:
            return self._error(request, 400, str(exc))
        except (JobNotFound, WorkflowNotFound) as exc:
            return self._error(request, 404, str(exc))
        except (Error, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            logger.warning(
                "cannot read the queue: %s", exc, extra={"page": name, "error": str(exc)}
            )
            return self._error(request, 503, f"cannot read the queue: {exc}")
        return self.templates.page(request, name, title=title, **context)

    def _may_read(self, request: Request) -> bool:
        """Whether the request may read: reads are open, or it carries the token as an
        HTTP Basic password (what a browser sends once asked) or a Bearer header."""
        token = self.settings.token
        if not self.settings.require_token_for_reads or token is None:
            return True
        given = _credential(request.headers.get("authorization", ""))
        return given is not None and hmac.compare_digest(given.encode(), token.encode())

    def _error(self, request: Request, status: int, message: str) -> Response:
        return self.templates.page(request, "error", status, title="Error", message=message)


def _credential(header: str) -> str | None:
    """The token in an Authorization header: a Bearer token, or a Basic password."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2]


def _filters(request: Request) -> dict[str, Any]:
    """list_jobs' keyword arguments from the query string; empty fields mean any."""
    params = request.query_params
    filters: dict[str, Any] = {}
    status = params.get("status", "").strip()
    if status:
        statuses = [s.value for s in JobStatus]
        if status not in statuses:
            raise BadRequest(f"status must be one of {', '.join(statuses)}, got {shown(status)}")
        filters["status"] = status
    for name in ("queue", "task"):
        value = params.get(name, "").strip()
        if len(value) > _MAX_FILTER:
            raise BadRequest(f"the {name} filter is longer than {_MAX_FILTER} characters")
        if value:
            filters[name] = value
    before = params.get("before", "").strip()
    if before:
        if not before.isdigit():
            raise BadRequest(f"before must be a job id, got {shown(before)}")
        filters["before"] = int(before)
    return filters
