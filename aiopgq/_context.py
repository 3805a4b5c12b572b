"""JobContext: what a handler that asks for it knows and can do about the job it runs."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import asyncpg

from ._db.connection import Connection
from ._db.statements import Statements
from ._errors import ConfigurationError, LeaseLost
from ._models import Job
from ._payload import decode_payload, encode_result
from ._steps import StepRun, seconds_of

# A state is saved with every heartbeat that carries it: keep it small.
MAX_STATE_BYTES = 100_000


@dataclass(frozen=True)
class Lease:
    """The fencing token of one run of a job: the job, the attempt it was claimed with and
    the worker that claimed it. Every write of the job's outcome, and `ctx.transaction()`,
    is refused unless the job's row still carries all three.

    >>> ctx.lease  # Lease(job_id=42, attempt=2, worker='host:123:ab12cd34')

    Attributes:
        job_id: the job's id.
        attempt: the attempt this run was claimed with, from 1.
        worker: the id of the worker that claimed it.
    """

    job_id: int
    attempt: int
    worker: str


class ContextServices(Protocol):
    """What a JobContext needs of the worker that runs it (aiopgq._worker.handlers)."""

    @property
    def pool(self) -> asyncpg.Pool: ...
    @property
    def sql(self) -> Statements: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def holds_transactions(self) -> bool: ...
    def cancel_requested(self, job: Job) -> bool: ...
    def progress_reported(self, context: JobContext) -> None: ...
    def transaction_committed(self, context: JobContext) -> None: ...


class _JobLogger(logging.LoggerAdapter):  # type: ignore[type-arg]  # generic in stubs only
    """A logger whose records carry the job's fields, merged with the call's own extra."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class JobContext:
    """The job a handler runs, for handlers that declare a parameter of this type (it is
    not part of the payload: enqueue does not ask for it).

    >>> @queue.task(name="report.build")
    ... async def build(ctx: JobContext, day: str) -> None: ctx.logger.info("try %s", ctx.attempt)

    The worker makes it; a handler gets it, and does not build one.

    Args:
        job: the job this run is of, as claimed.
        services: what the context needs of the worker running the job.
        checkpoint_text: the state an earlier run saved, as JSON text (default None: none).
    """

    def __init__(
        self,
        job: Job,
        services: ContextServices,
        *,
        checkpoint_text: str | None = None,
    ) -> None:
        self.job = job
        self.lease = Lease(job.id, job.attempts, services.worker_id)
        self._services = services
        self._checkpoint_text = checkpoint_text
        self._checkpoint: Any = None
        self._checkpoint_read = checkpoint_text is None
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None
        self.progress_value: float | None = None  # reported, not necessarily saved yet
        self.state_text: str | None = None
        self.result_text: str | None = None
        self.committed = False  # ctx.transaction() committed the job's `done`
        self.ended = False  # the handler returned or raised: the outcome is the worker's
        # Its asyncio task was cancelled: a `def` handler's thread, which runs on, must go
        # on seeing `cancelled` after the worker dropped its stop request.
        self.stopped = False
        self._in_transaction = False
        self._steps: StepRun | None = None  # made by the run's first durable step

    def __repr__(self) -> str:
        return f"<JobContext job {self.job_id} ({self.task}) attempt {self.attempt}>"

    @property
    def job_id(self) -> int:
        """The running job's id."""
        return self.job.id

    @property
    def attempt(self) -> int:
        """This run's attempt, from 1 (snoozes and releases at shutdown do not count)."""
        return self.job.attempts

    @property
    def max_attempts(self) -> int:
        """The most attempts this job may make (its task's `max_attempts` unless enqueued with
        another)."""
        return self.job.max_attempts

    @property
    def queue(self) -> str:
        """The name of the queue the job was claimed from."""
        return self.job.queue

    @property
    def task(self) -> str:
        """The task's name, as registered with `@queue.task(name=...)`."""
        return self.job.task

    @property
    def enqueued_at(self) -> datetime:
        """When the job was enqueued (an aware datetime, the database's clock)."""
        return self.job.created_at

    @property
    def scheduled_at(self) -> datetime:
        """When the job was due (its run_at: a retry's or a snooze's time, or enqueue's)."""
        return self.job.run_at

    @property
    def tick(self) -> datetime | None:
        """A periodic job's schedule time (in the schedule's time zone), None for other jobs
        (as current_job().tick; set when the periodic task's handler is called, so a
        middleware sees it after call_next())."""
        return self.job.tick

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """Logger `aiopgq.job`, its records carrying job_id, task, queue and attempt."""
        if self._logger is None:
            job = self.job
            extra = {"job_id": job.id, "task": job.task, "queue": job.queue}
            extra["attempt"] = job.attempts
            self._logger = _JobLogger(logging.getLogger("aiopgq.job"), extra)
        return self._logger

    @property
    def cancelled(self) -> bool:
        """True once the worker asked this run to stop: the job was cancelled
        (`Queue.cancel`), its lease could not be renewed, or the worker is stopping past
        its grace period. An async handler is cancelled then as well; a `def` handler in
        its thread should check this and return."""
        return self.stopped or self._services.cancel_requested(self.job)

    @property
    def checkpoint(self) -> Any:
        """The state an earlier run of this job saved with `progress(state=...)`, or None:
        resume from it."""
        if not self._checkpoint_read:
            try:
                self._checkpoint = decode_payload(self._checkpoint_text or "null")
            except ValueError as exc:  # written by SQL, past progress()'s checks
                raise ValueError(
                    f"job {self.job.id}: its saved checkpoint cannot be decoded ({exc})"
                ) from None
            self._checkpoint_read = True
        return self._checkpoint

    async def progress(self, fraction: float, *, state: Any = None) -> None:
        """Report progress (0..1) and, optionally, a small JSON state to resume from. Saved
        by the worker's next heartbeat (no round trip of its own) and with the job's
        outcome; a later run of the job gets the state back as `ctx.checkpoint`.

        >>> await ctx.progress(0.4, state={"next_page": 41})

        Args:
            fraction: how far the run is, from 0 to 1.
            state: a JSON value to resume from, at most 100,000 bytes as JSON text
                (default None: no new state).

        Raises:
            TypeError: `fraction` is not a number, or `state` cannot be stored as JSON.
            ValueError: `fraction` is outside 0..1, or `state` is over 100,000 bytes.
        """
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise TypeError(f"progress: fraction must be a number from 0 to 1, got {fraction!r}")
        if not (0.0 <= fraction <= 1.0) or math.isnan(fraction):
            raise ValueError(f"progress: fraction must be from 0 to 1, got {fraction}")
        if state is not None:
            try:
                text = encode_result(state)
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"progress: the state cannot be stored as JSON ({exc}); pass JSON types"
                ) from None
            if text is not None and len(text) > MAX_STATE_BYTES:
                raise ValueError(
                    f"progress: the state is {len(text)} bytes, over {MAX_STATE_BYTES}: "
                    "save a reference (a key, an offset) rather than the data"
                )
            self.state_text = text
        self.progress_value = float(fraction)
        self._services.progress_reported(self)

    def set_result(self, value: Any) -> None:
        """The result that `transaction()` commits with the job's `done` (call it inside the
        block; the handler's own return value is not stored once that committed).

        >>> async with ctx.transaction() as conn: ...; ctx.set_result({"rows": 3})

        Args:
            value: the result, a JSON value.

        Raises:
            TypeError: `value` cannot be stored as JSON.
        """
        try:
            self.result_text = encode_result(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"set_result: the value cannot be stored as JSON ({exc})") from None

    async def parent_results(self) -> dict[int, Any]:
        """The results of this job's parents (enqueued with `depends_on=`) that ended done:
        `{parent_job_id: result}`, in id order. With `on_parent_failure="run"` a parent that
        failed or was cancelled has no entry; a job without parents gets `{}`. Each result
        is kept with the dependency when its parent finishes, so a parent archived or
        pruned since is still there.

        >>> async def report(ctx: JobContext) -> int:
        ...     return sum((await ctx.parent_results()).values())

        Returns:
            The done parents' results by job id, as JSON decoded (None for a parent
                that returned nothing).
        """
        services = self._services
        async with services.pool.acquire() as conn:
            rows = await conn.fetch(services.sql.parent_results, self.job_id)
        return {row[0]: None if row[1] is None else decode_payload(row[1]) for row in rows}

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A connection in a transaction that also commits the job's `done`: your rows and
        the completion commit together or not at all. Guarded by the lease: if this run
        lost it (expired, rescued, maybe running elsewhere), the commit is refused with
        LeaseLost and everything rolls back.

        >>> async with ctx.transaction() as conn:
        ...     await conn.execute("INSERT INTO ledger (job_id) VALUES ($1)", ctx.job_id)

        Yields:
            A connection of the worker's pool, inside the transaction.

        Raises:
            LeaseLost: this run no longer holds the job: everything rolled back.
            ConfigurationError: the worker runs with `hold_transaction=True`.
            RuntimeError: a second `transaction()` of the same run (one commits the job's done).
        """
        services = self._services
        if services.holds_transactions:
            raise ConfigurationError(
                "ctx.transaction() is not available with hold_transaction=True (the held "
                "batch transaction locks the job's row until the handler returns)"
            )
        steps = self._steps
        if steps is not None and steps.in_flight is not None:
            async with steps.transaction() as conn:  # commits with the step's record
                yield conn
            return
        if steps is not None:
            await steps.settle()  # a step before this has its row before the done commits
        if self.committed or self._in_transaction:
            raise RuntimeError(
                f"job {self.job_id}: ctx.transaction() commits the job's done once; "
                "do all of its database work in one `async with ctx.transaction()` block"
            )
        self._in_transaction = True
        lease = self.lease
        try:
            async with services.pool.acquire() as conn, conn.transaction():
                yield conn
                row = await conn.fetchrow(
                    services.sql.commit_done,
                    lease.job_id,
                    lease.attempt,
                    lease.worker,
                    self.result_text,
                    self.progress_value,
                    self.state_text,
                )
                if row is None:
                    raise LeaseLost(
                        f"job {lease.job_id}: attempt {lease.attempt} on worker "
                        f"{lease.worker} no longer holds the job (its lease expired and it "
                        "was rescued): the transaction was rolled back"
                    )
            self.committed = True
            services.transaction_committed(self)
        finally:
            self._in_transaction = False

    # -- durable steps: aiopgq/_steps.py, docs/durable-steps.md (the replay rules) ----

    @property
    def step_run(self) -> StepRun | None:
        """The run's durable steps, once it called one (for the worker: their last row)."""
        return self._steps

    def _step_run(self, what: str) -> StepRun:
        if self._services.holds_transactions:
            raise ConfigurationError(f"ctx.{what}() is not available with hold_transaction=True")
        if self._steps is None:
            self._steps = StepRun(self._services, self.lease, self.job.run_at)
        return self._steps

    async def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` (async, or sync in a thread) once for this job and store
        its JSON return value; later runs of the job (retries, rescues, resumes) get it back
        without calling `fn`. A step that raises is not recorded; `ctx.transaction()` inside
        `fn` commits with the step's record when `fn` returns.

        >>> rows = await ctx.step("fetch", fetch_rows, url)

        Args:
            name: unique within a run (e.g. f"page-{i}").
            fn: the function to run.
            *args: positional arguments for `fn`.
            **kwargs: keyword arguments for `fn`.

        Returns:
            What `fn` returned, in this run or the one that recorded the step.

        Raises:
            StepMismatch: an earlier run recorded another step at this place.
            ValueError: `name` empty or used twice in this run; a value over 1 MB as JSON.
            TypeError: the value cannot be stored as JSON.
            LeaseLost: this run no longer holds the job (nothing recorded).
            RuntimeError: another step of this run has not returned yet.
        """
        return await self._step_run("step").step(name, fn, args, kwargs)

    async def sleep(self, delay: float | timedelta) -> None:
        """Sleep durably: the job leaves its worker (no slot, connection or lease) and runs
        again from the top after `delay`, its steps replayed; not a failed attempt.

        >>> await ctx.sleep(timedelta(days=1))

        Args:
            delay: seconds or a timedelta, 0 to 10 years.

        Raises:
            TypeError: not a number or timedelta.
            ValueError: negative or over 10 years.
            StepMismatch: an earlier run recorded another step at this place.
            LeaseLost: this run no longer holds the job.
        """
        seconds = seconds_of(delay, "ctx.sleep")
        await self._step_run("sleep").sleep(seconds, None, self.progress_value, self.state_text)

    async def sleep_until(self, when: datetime) -> None:
        """Sleep durably until `when`, as `sleep` does.

        >>> await ctx.sleep_until(datetime(2030, 1, 1, tzinfo=timezone.utc))

        Args:
            when: an aware datetime (one past: the job runs again at once).

        Raises:
            TypeError: `when` is not an aware datetime.
            StepMismatch: an earlier run recorded another step at this place.
            LeaseLost: this run no longer holds the job.
        """
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise TypeError(f"ctx.sleep_until: an aware datetime, got {when!r}")
        at = when.timestamp()
        await self._step_run("sleep_until").sleep(None, at, self.progress_value, self.state_text)

    async def wait_event(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """The payload of event `name` (`Queue.emit_event`): at once if it was emitted (and
        is kept: 30 days), else the job leaves its worker until it is, and runs again from
        the top, its steps replayed. Recorded as a step.

        >>> paid = await ctx.wait_event(f"payment:{order_id}", timeout=timedelta(days=2))

        Args:
            name: the event's name.
            timeout: seconds or a timedelta from the first wait (default None: none).

        Returns:
            The event's payload (None without one).

        Raises:
            TimeoutError: the timeout passed first (raised on the run that resumes).
            ValueError: `name` empty; `timeout` negative or over 10 years.
            StepMismatch: an earlier run recorded another step at this place.
            LeaseLost: this run no longer holds the job.
        """
        seconds = None if timeout is None else seconds_of(timeout, "ctx.wait_event timeout")
        return await self._step_run("wait_event").wait_event(name, seconds)


def context_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of `fn`'s parameter annotated JobContext, if it has one (string
    annotations too, as `from __future__ import annotations` makes them)."""
    try:
        signature = inspect.signature(fn, eval_str=True)
    except Exception:  # an annotation that does not resolve: read them as written
        signature = inspect.signature(fn)
    found = [p.name for p in signature.parameters.values() if _is_context(p.annotation)]
    if len(found) > 1:
        raise TypeError(
            f"{getattr(fn, '__qualname__', fn)}: more than one parameter is a JobContext "
            f"({', '.join(found)}); declare one"
        )
    return found[0] if found else None


def _is_context(hint: Any) -> bool:
    if hint is JobContext:
        return True
    return isinstance(hint, str) and hint.rpartition(".")[2] == "JobContext"


# A middleware: `async def middleware(ctx, call_next)`, around every job's handler.
Middleware = Callable[[JobContext, Callable[[], Awaitable[Any]]], Awaitable[Any]]
