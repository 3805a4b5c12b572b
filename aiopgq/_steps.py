"""Durable steps: what `ctx.step`, `ctx.sleep` and `ctx.wait_event` do for one run of a job.

A run reads the steps its job's earlier runs recorded once, at its first step (jobs that
call none read nothing), then walks them in order: the step at position n of this run
replays the row at position n when its name (and kind) match, and runs otherwise; any
other difference is a StepMismatch, never a silent reuse. A step's row is written by one
statement, fenced by the run's lease:

- a step without database work: its row alone (sql/complete/record_step.sql), written
  by a task started when the step returns (so at the handler's next wait for anything),
  or, when the handler returns first (the step was its last action), with the job's
  done in the completer's batched statement (sql/complete/complete_special.sql): no
  statement of its own. The next step, sleep or wait, ctx.transaction(), and every
  other ending of the run wait for the row first. A crash between the step's outside
  effect and the row runs the step again (at-least-once, for the step in flight only);
  once the row is there, no run calls it again.
- a step whose function uses `ctx.transaction()`: the transaction stays open until the
  step returns, then the row (with the return value) is inserted on the same connection
  and everything commits together (exactly-once for what it covers). A run that finds
  the row already there (another run of the job recorded it: the INSERT waits for that
  commit, then does nothing) rolls its own transaction back and replays the value.

Sleeping and waiting end the run after one statement that ends its lease and records the
sleep or the event (sql/complete/sleep_job.sql, sql/functions/steps.sql); Suspended then
tells the worker that the job's outcome is written already.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import anyio
import asyncpg

from ._db.connection import Connection
from ._db.statements import Statements
from ._errors import LeaseLost, StepMismatch
from ._payload import decode_payload, encode_result

# A step's result is stored with the job: keep it small (a reference, not the data).
MAX_STEP_BYTES = 1_000_000
# The longest sleep or wait timeout (as Snooze allows).
MAX_SECONDS = 10 * 365 * 86400


class Suspended(BaseException):
    """The run ended in `ctx.sleep` or `ctx.wait_event`, whose statement wrote the job's
    state: the worker writes no outcome. A BaseException, so that a handler's `except
    Exception` does not swallow it."""


@dataclass(frozen=True)
class _Recorded:
    position: int
    name: str
    kind: str
    result_text: str | None

    def value(self) -> Any:
        return None if self.result_text is None else decode_payload(self.result_text)


class _StepTransaction:
    """The connection and transaction of the step in flight, opened by ctx.transaction()."""

    def __init__(self, conn: Connection, transaction: Any) -> None:
        self.conn = conn
        self.transaction = transaction
        self.committed = False


@dataclass
class _InFlight:
    position: int
    name: str
    started: float
    transaction: _StepTransaction | None = None


class StepServices(Protocol):
    """What the steps need of the worker running the job (JobContext's services)."""

    @property
    def pool(self) -> asyncpg.Pool: ...
    @property
    def sql(self) -> Statements: ...


class RunLease(Protocol):
    """The run's fencing token (JobContext's Lease)."""

    @property
    def job_id(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def worker(self) -> str: ...


@dataclass(frozen=True, slots=True)
class LastStep:
    """A step that was the handler's last action: its row, written with the job's done."""

    position: int
    name: str
    result: str | None  # JSON text
    started: float  # epoch seconds


class StepRun:
    """The durable steps of one run of a job (one per JobContext, made at its first step)."""

    def __init__(self, services: StepServices, lease: RunLease, scheduled_at: datetime) -> None:
        self._services = services
        self._lease = lease
        self._scheduled_at = scheduled_at.timestamp()
        self._recorded: dict[int, _Recorded] | None = None
        self._positions: dict[str, int] = {}
        self._names: set[str] = set()
        self._next_position = 0
        self._sleeps = 0
        self.in_flight: _InFlight | None = None
        # The step that returned last, its row not written yet, and the task writing it.
        self._unrecorded: tuple[_InFlight, str | None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._write_failed: BaseException | None = None

    # -- the sequence ----------------------------------------------------------

    async def _load(self) -> dict[int, _Recorded]:
        services = self._services
        async with services.pool.acquire() as conn:
            rows = await conn.fetch(services.sql.steps_of_run, self._lease.job_id)
        recorded = {row[0]: _Recorded(row[0], row[1], row[2], row[3]) for row in rows}
        self._positions = {r.name: r.position for r in recorded.values()}
        return recorded

    async def _next(self, name: str, kind: str) -> tuple[int, _Recorded | None]:
        """This run's next position for a step `name`, and what an earlier run recorded there."""
        if self.in_flight is not None:
            raise RuntimeError(
                f"job {self._lease.job_id}: step {name!r} started while step "
                f"{self.in_flight.name!r} runs; durable steps run one at a time, in order "
                "(await each ctx.step before the next)"
            )
        if not isinstance(name, str) or not name:
            raise ValueError(f"a step's name must be a non-empty string, got {name!r}")
        if self._writer is not None:
            await self.settle()  # the step before has its row before this one runs
        if self._recorded is None:
            self._recorded = await self._load()
        if name in self._names:
            raise ValueError(
                f"job {self._lease.job_id}: step name {name!r} is used twice in one run; "
                "names must be unique within a run (number repeated steps: f'page-{i}')"
            )
        self._names.add(name)
        position = self._next_position
        self._next_position += 1
        recorded = self._recorded.get(position)
        if recorded is not None and (recorded.name, recorded.kind) != (name, kind):
            raise StepMismatch(
                f"job {self._lease.job_id}: step {position + 1} of this run is {kind} "
                f"{name!r}, but an earlier run recorded {recorded.kind} {recorded.name!r} "
                "there: the handler's steps changed between attempts. Steps must be called "
                "in the same order on every run (no branching on time or randomness "
                "outside a step); deploy the old order back, or cancel the job"
            )
        if recorded is None and name in self._positions:
            raise StepMismatch(
                f"job {self._lease.job_id}: step {name!r} is step {position + 1} of this "
                f"run, but an earlier run recorded it as step {self._positions[name] + 1}: "
                "the handler's steps changed between attempts"
            )
        return position, recorded

    # -- ctx.step --------------------------------------------------------------

    async def step(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Replay step `name` or run it and record its return value."""
        if not callable(fn):
            raise TypeError(f"ctx.step({name!r}, fn): fn must be callable, got {fn!r}")
        position, recorded = await self._next(name, "step")
        if recorded is not None:
            return recorded.value()
        flight = self.in_flight = _InFlight(position, name, time.time())
        try:
            value = await _call(fn, args, kwargs)
            text = _encoded(name, value)
            held, flight.transaction = flight.transaction, None
            if held is None:
                # Its row: at the next loop turn, or with the job's done when the handler
                # returns before that (take_last).
                self._unrecorded = (flight, text)
                self._writer = asyncio.get_running_loop().create_task(self._write_unrecorded())
                return value
            else:
                try:
                    written = await self._record(held.conn, flight, text)
                    if written:
                        await held.transaction.commit()
                        held.committed = True
                finally:
                    await self._close(held)  # rolls back what did not commit
        finally:
            self.in_flight = None
            if flight.transaction is not None:  # the step raised: its work rolls back
                await self._close(flight.transaction)
        if written:
            return value
        return await self._replay_taken(flight)

    async def _write_unrecorded(self) -> None:
        """The writer: the unrecorded step's row, unless the job's done took it. What the
        write met is raised by settle()."""
        pending, self._unrecorded = self._unrecorded, None
        if pending is None:
            return
        flight, text = pending
        try:
            async with self._services.pool.acquire() as conn:
                written = await self._record(conn, flight, text)
            if not written:
                await self._replay_taken(flight)  # another run's row: the same value
        except Exception as exc:  # kept for settle(): this task's own end stays quiet
            self._write_failed = exc

    async def settle(self) -> None:
        """Wait until the last step's row is written (the run goes on to another step, or
        ends other than by returning); raise what its write met (LeaseLost, a lost
        connection). Shielded: a run cancelled meanwhile still records what it did."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with anyio.CancelScope(shield=True):
                await asyncio.shield(writer)
        failed, self._write_failed = self._write_failed, None
        if failed is not None:
            raise failed

    def take_last(self) -> LastStep | None:
        """The last step, if its row is not being written yet: the job's done writes it.
        None when there is none, or its writer has it (settle() waits for that)."""
        pending, self._unrecorded = self._unrecorded, None
        if pending is None:
            return None
        self._writer = None  # it starts, finds nothing, and ends
        flight, text = pending
        return LastStep(flight.position, flight.name, text, flight.started)

    async def _record(self, conn: Connection, flight: _InFlight, text: str | None) -> bool:
        lease = self._lease
        row = await conn.fetchrow(
            self._services.sql.record_step,
            lease.job_id,
            lease.attempt,
            lease.worker,
            flight.position,
            flight.name,
            text,
            flight.started,
        )
        return row is not None

    async def _replay_taken(self, flight: _InFlight) -> Any:
        """The step's row was not written: another run recorded it (replay that), or this
        run lost its lease."""
        recorded = (await self._load()).get(flight.position)
        if recorded is not None and recorded.name == flight.name and recorded.kind == "step":
            return recorded.value()
        lease = self._lease
        raise LeaseLost(
            f"job {lease.job_id}: attempt {lease.attempt} on worker {lease.worker} no longer "
            f"holds the job: step {flight.name!r} was not recorded (its transaction, if any, "
            "was rolled back)"
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """ctx.transaction() inside a step: a transaction that commits when the step returns,
        with the step's row."""
        flight = self.in_flight
        assert flight is not None
        if flight.transaction is not None:
            raise RuntimeError(
                f"job {self._lease.job_id}: step {flight.name!r} opened ctx.transaction() "
                "twice; do a step's database work in one `async with ctx.transaction()`"
            )
        conn = await self._services.pool.acquire()
        held = flight.transaction = _StepTransaction(conn, conn.transaction())
        try:
            await held.transaction.start()
            yield conn
        except BaseException:
            flight.transaction = None
            await self._close(held)
            raise
        # Left open: step() inserts the row on it, commits, and gives it back.

    async def _close(self, held: _StepTransaction) -> None:
        """Roll back what is not committed and give the connection back; shielded, so that
        a handler cancelled in a step (its timeout, a cancel) leaves no open transaction on
        a pooled connection."""
        with anyio.CancelScope(shield=True):
            if not held.committed:
                try:
                    await held.transaction.rollback()
                except Exception:  # a dead connection: the server rolled back
                    pass
            await self._services.pool.release(held.conn)  # type: ignore[arg-type]

    # -- ctx.sleep -------------------------------------------------------------

    async def sleep(
        self,
        delay: float | None,
        until: float | None,
        progress: float | None,
        state: str | None,
    ) -> None:
        """Sleep for `delay` seconds (or until the epoch seconds `until`), durably."""
        self._sleeps += 1
        name = f"sleep:{self._sleeps}"
        position, recorded = await self._next(name, "sleep")
        if recorded is not None:
            wake = float(recorded.value()["until"])
            if wake <= self._scheduled_at or wake <= time.time():
                return  # slept: this run was due at or after its wake time
            until, delay = wake, None  # ran early: sleep on until the recorded time
        lease = self._lease
        services = self._services
        async with services.pool.acquire() as conn:
            row = await conn.fetchrow(
                services.sql.sleep_job,
                lease.job_id,
                lease.attempt,
                lease.worker,
                position,
                name,
                until,
                delay,
                time.time(),
                progress,
                state,
            )
        if row is None:
            raise LeaseLost(
                f"job {lease.job_id}: attempt {lease.attempt} on worker {lease.worker} no "
                "longer holds the job: its sleep was not recorded"
            )
        raise Suspended(f"sleeping until {row[0]}")

    # -- ctx.wait_event --------------------------------------------------------

    async def wait_event(self, event: str, seconds: float | None) -> Any:
        """The payload of event `event`, or suspend the run until it is emitted."""
        if not isinstance(event, str) or not event:
            raise ValueError(
                f"wait_event: the event name must be a non-empty string, got {event!r}"
            )
        position, recorded = await self._next(f"event:{event}", "event")
        if recorded is not None:
            return _event_value(event, recorded.value())
        lease = self._lease
        services = self._services
        async with services.pool.acquire() as conn:
            row = await conn.fetchrow(
                services.sql.wait_event,
                lease.job_id,
                lease.attempt,
                lease.worker,
                position,
                event,
                time.time(),
                seconds,
            )
        assert row is not None  # a set-returning function that returns one row
        outcome, payload = row[0], row[1]
        if outcome == "event":
            return None if payload is None else decode_payload(payload)
        if outcome == "timeout":
            return _event_value(event, {"timeout": True})
        if outcome == "waiting":
            raise Suspended(f"waiting for event {event!r}")
        raise LeaseLost(
            f"job {lease.job_id}: attempt {lease.attempt} on worker {lease.worker} no longer "
            f"holds the job: its wait for event {event!r} was not recorded"
        )


def seconds_of(delay: float | timedelta, what: str) -> float:
    """`delay` (seconds or a timedelta) as seconds, checked: 0 to 10 years."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise TypeError(f"{what}: seconds or a timedelta, got {delay!r}")
    else:
        seconds = float(delay)
    if not 0 <= seconds <= MAX_SECONDS:
        raise ValueError(f"{what}: between 0 s and 10 years, got {seconds:g} s")
    return seconds


def _event_value(event: str, stored: Any) -> Any:
    if isinstance(stored, dict) and stored.get("timeout"):
        raise TimeoutError(f"event {event!r} was not emitted within the wait's timeout")
    return stored.get("payload") if isinstance(stored, dict) else None


def _encoded(name: str, value: Any) -> str | None:
    try:
        text = encode_result(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"step {name!r} returned a value that cannot be stored as JSON ({exc}); "
            "return JSON types"
        ) from None
    if text is not None and len(text) > MAX_STEP_BYTES:
        raise ValueError(
            f"step {name!r} returned {len(text)} bytes of JSON, over {MAX_STEP_BYTES}: "
            "return a reference (a key, a path) rather than the data"
        )
    return text


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004  # an object with an async __call__
    ):
        return await fn(*args, **kwargs)
    value = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    if inspect.isawaitable(value):  # e.g. a lambda that returns a coroutine
        value = await value
    return value
