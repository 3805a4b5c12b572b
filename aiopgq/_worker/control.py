"""Control messages: NOTIFY payloads on the schema's channel that are not queue names.

The channel's plain payload is a queue name: a wake-up (the insert trigger,
release.sql, rescues). Operator actions send a JSON object with one key instead:

    {"pause": "<queue>"}    sql/admin/set_queue_paused.sql (Queue.pause)
    {"resume": "<queue>"}   sql/admin/set_queue_paused.sql (Queue.resume; the queue's name follows)
    {"cancel": <job id>}    sql/admin/cancel.sql (Queue.cancel of a running job)
    {"limits": "<queue>"}   sql/admin/configure_queue.sql (Queue.configure: read again which
                            queues are paused or limited)

A message is a hint, never an order: any role that can connect may NOTIFY on the
channel, so the worker reads the state from the database before it acts. A pause,
resume or limits message makes it read its queues' paused and limited sets again (one
read, however many arrive meanwhile); a cancel message for a job it runs makes it read
whether that job is cancelled (sql/lease/cancelled_jobs.sql: one statement for the messages
that arrived together), and only then stop the handler. Messages for jobs it does not
run cost nothing.

Workers that predate these messages compare each payload with their queue names
(`payload in queues`) and so ignore them. A worker that serves a queue whose name
is one of these JSON texts takes it as a wake-up, as the old ones do; then the
fallbacks (the paused-queue refresh, the heartbeat) still deliver the message.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

import anyio
import asyncpg

from .._db.connection import Connection
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .._db.transient import describe

logger = logging.getLogger("aiopgq.listener")


class PauseTarget(Protocol):
    def refresh_soon(self) -> None: ...


class CancelTarget(Protocol):
    @property
    def running(self) -> Mapping[int, object]: ...
    def cancel(self, job_ids: Iterable[int]) -> int: ...


def is_control(payload: str) -> bool:
    """True if `payload` may be a control message (a JSON object); cheap."""
    return payload[:1] == "{"


class Controls:
    """Turns the control messages the listener receives into reads of the database, and
    what those reads find into actions of the worker's parts (see the module docstring)."""

    def __init__(self, sql: Statements, pauses: PauseTarget, dispatcher: CancelTarget) -> None:
        self._sql = sql
        self._pauses = pauses
        self._dispatcher = dispatcher
        self._cancels: set[int] = set()  # ids of cancel messages not yet checked
        self._cancel_requested = anyio.Event()
        self._warned = False  # a message the database contradicts: warned once, then DEBUG

    def received(self, payload: str) -> None:
        """A control payload arrived (see the module docstring); others are ignored."""
        try:
            message = json.loads(payload)
        except (ValueError, RecursionError):
            return
        if not isinstance(message, dict) or len(message) != 1:
            return
        ((kind, value),) = message.items()
        if kind in ("pause", "resume", "limits") and isinstance(value, str):
            self._pauses.refresh_soon()  # one read, whichever queue it names
        elif kind == "cancel" and isinstance(value, int) and not isinstance(value, bool):
            if value in self._dispatcher.running:
                self._cancels.add(value)
                self._cancel_requested.set()
        else:
            logger.debug("ignoring an unknown control message %r", payload[:200])

    def reconnected(self) -> None:
        """The LISTEN connection is back: messages sent meanwhile were lost. Pauses and
        limits are read again now; cancellations arrive with the next heartbeat."""
        self._pauses.refresh_soon()

    async def run(self, pool: asyncpg.Pool) -> None:
        """Check the cancel messages received, one statement per batch; cancel to stop."""
        while True:
            await self._cancel_requested.wait()
            self._cancel_requested = anyio.Event()
            ids, self._cancels = sorted(self._cancels), set()
            try:
                cancelled = await run_pooled(pool, functools.partial(self._read, ids=ids))
            except Exception as exc:  # the heartbeat finds cancelled jobs all the same
                logger.warning(
                    "could not check cancel requests for jobs %s (%s); their heartbeat "
                    "will tell if they were cancelled",
                    ids,
                    describe(exc),
                )
                continue
            if cancelled:
                stopped = self._dispatcher.cancel(cancelled)
                logger.debug("cancelled in the database: %s; stopped %s", cancelled, stopped)
            ignored = sorted(set(ids) - set(cancelled))
            if ignored:
                self._ignored(ignored)

    async def _read(self, conn: Connection, *, ids: list[int]) -> list[int]:
        return list(await conn.fetchval(self._sql.cancelled_jobs, ids))

    def _ignored(self, ids: list[int]) -> None:
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        logger.log(
            level,
            "ignored cancel messages for jobs %s: the database does not have them cancelled "
            "(a NOTIFY on channel %s not sent by Queue.cancel; any role that can connect "
            "can send one, and the worker acts only on what the database says)",
            ids,
            self._sql.channel,
            extra={"job_ids": ids},
        )
