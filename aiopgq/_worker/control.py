"""Control messages: NOTIFY payloads on the schema's channel that are not queue names.

The channel's plain payload is a queue name: a wake-up (the insert trigger,
release.sql, rescues). Operator actions send a JSON object with one key instead:

    {"pause": "<queue>"}    sql/set_queue_paused.sql (Queue.pause)
    {"resume": "<queue>"}   sql/set_queue_paused.sql (Queue.resume; the queue's name follows)
    {"cancel": <job id>}    sql/cancel.sql (Queue.cancel of a running job)
    {"limits": "<queue>"}   sql/configure_queue.sql (Queue.configure: read again which
                            queues are paused or limited)

Workers that predate these messages compare each payload with their queue names
(`payload in queues`) and so ignore them. A worker that serves a queue whose name
is one of these JSON texts takes it as a wake-up, as the old ones do; then the
fallbacks (the paused-queue refresh, the heartbeat) still deliver the message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Protocol

logger = logging.getLogger("aiopgq.listener")


class PauseTarget(Protocol):
    def apply(self, queue: str, paused: bool) -> None: ...
    def refresh_soon(self) -> None: ...


class CancelTarget(Protocol):
    def cancel(self, job_ids: Iterable[int]) -> int: ...


def is_control(payload: str) -> bool:
    """True if `payload` may be a control message (a JSON object); cheap."""
    return payload[:1] == "{"


class Controls:
    """Applies the control messages the listener receives to the worker's parts."""

    def __init__(self, pauses: PauseTarget, dispatcher: CancelTarget) -> None:
        self._pauses = pauses
        self._dispatcher = dispatcher

    def received(self, payload: str) -> None:
        """A control payload arrived (see the module docstring); others are ignored."""
        try:
            message = json.loads(payload)
        except ValueError:
            return
        if not isinstance(message, dict) or len(message) != 1:
            return
        ((kind, value),) = message.items()
        if kind in ("pause", "resume") and isinstance(value, str):
            self._pauses.apply(value, kind == "pause")
        elif kind == "cancel" and isinstance(value, int) and not isinstance(value, bool):
            if self._dispatcher.cancel([value]):
                logger.debug("cancel request for job %s: stopping its handler", value)
        elif kind == "limits" and isinstance(value, str):
            self._pauses.refresh_soon()  # one read, whichever queue it names
        else:
            logger.debug("ignoring an unknown control message %r", payload[:200])

    def reconnected(self) -> None:
        """The LISTEN connection is back: messages sent meanwhile were lost. Pauses and
        limits are read again now; cancellations arrive with the next heartbeat."""
        self._pauses.refresh_soon()
