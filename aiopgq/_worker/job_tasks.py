"""Starting a job's asyncio task: at once where the Python allows it, else at the loop's
next turn.

A no-op job costs more in asyncio's task machinery than in anything of ours: a task
scheduled with call_soon, a handle, a turn of the loop, a weak reference in the task
registry. A job that never waits needs none of it if its first step runs inside the
dispatcher's call, and what the handler sees there must be what it would see in a
task of its own: `asyncio.current_task()` is the task that later runs the rest of it
(anyio's cancel scopes, `asyncio.timeout` and task groups record it on entry and check
it on exit), its context variables are a copy of its own.

- Python 3.12 and later: `asyncio.Task(..., eager_start=True)` does exactly that.
- CPython 3.11 (`start_now`): the task object is made first and not yet initialized
  (`Task.__new__`), entered as the current task for the first step, and initialized
  only if the job waits: the rest of the coroutine then runs in it as in any task
  (`_Resumed` hands the task what the first step waited for). A job that ends in its
  first step leaves the object to the garbage collector, never scheduled.
- Otherwise (Python 3.10, a loop with a task factory, a pure-Python asyncio): a plain
  task, whose first step is at the loop's next turn.

The dispatcher's plain lane (plain_lane.py) uses StartNow's way on CPython 3.11 to 3.13
(`plain_starter`); the rest of a job that waits runs through a Finishing.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
from collections.abc import Callable, Coroutine, Generator
from typing import Any

# A job's coroutine as the dispatcher starts it.
JobRun = Coroutine[Any, Any, None]

# Each job runs in an asyncio task of this name plus its id: the watchdog reads it.
JOB_TASK_PREFIX = "aiopgq job "

# CPython with asyncio's C tasks, 3.11 to 3.13 (tested on each): a task can be made
# first and initialized later, as StartNow does. (3.10's Task takes no context, which
# the first step's copy must be given; 3.14 keeps its tasks in a new registry.)
_C_TASKS = (
    (3, 11) <= sys.version_info[:2] <= (3, 13)
    and sys.implementation.name == "cpython"
    and asyncio.Task is getattr(asyncio.tasks, "_CTask", None)
    and asyncio.tasks._enter_task is getattr(asyncio.tasks, "_c_enter_task", None)
)
# The general path's starter: StartNow on 3.11, asyncio's eager tasks from 3.12 on.
_START_NOW = _C_TASKS and sys.version_info[:2] == (3, 11)
_EAGER_TASKS = sys.version_info >= (3, 12)


class JobStarter:
    """Starts the tasks of one batch: a context manager around the batch's loop.

    `start(coro, name=...)` returns the job's task, or None when the job ended inside
    the call (start_now); `eager` says whether a job can end inside the call (its task,
    where there is one, may be done already)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        start: Callable[..., asyncio.Task[None] | None],
        *,
        eager: bool,
    ) -> None:
        self._loop = loop
        self.start = start
        self.eager = eager

    def __enter__(self) -> JobStarter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


def job_starter(loop: asyncio.AbstractEventLoop) -> JobStarter:
    """The starter for this loop and this Python (see the module's docstring)."""
    if loop.get_task_factory() is not None:
        return JobStarter(loop, loop.create_task, eager=False)
    if _EAGER_TASKS:
        eager_task = functools.partial(asyncio.Task, loop=loop, eager_start=True)  # type: ignore[call-arg, unused-ignore]
        return JobStarter(loop, eager_task, eager=True)
    if _START_NOW:
        return StartNow(loop)
    # What loop.create_task does, without its Python wrapper (two calls per job).
    return JobStarter(loop, functools.partial(asyncio.Task, loop=loop), eager=False)


def plain_starter(loop: asyncio.AbstractEventLoop) -> StartNow | None:
    """The starter of the dispatcher's plain lane (plain_lane.py), where this Python and
    this loop allow it: a StartNow on CPython 3.11 to 3.13 with no task factory."""
    if _C_TASKS and loop.get_task_factory() is None:
        return StartNow(loop)
    return None


class StartNow(JobStarter):
    """CPython 3.11 (and the plain lane to 3.13): each job's first step inside start(),
    in its own (not yet initialized) task. Around the batch the calling task is left,
    so that each job's task can be entered as the current one; it is entered again at
    the end."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop, self._start_now, eager=True)
        self._caller: asyncio.Task[Any] | None = None

    def __enter__(self) -> JobStarter:
        self._caller = caller = asyncio.current_task(self._loop)
        if caller is not None:
            leave_task(self._loop, caller)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._caller is not None:
            enter_task(self._loop, self._caller)
            self._caller = None

    def _start_now(self, coro: JobRun, *, name: str) -> asyncio.Task[None] | None:
        loop = self._loop
        task = _Starting.__new__(_Starting)
        task._started = coro
        task.set_name(name)  # the watchdog reads it, during the first step too
        context = contextvars.copy_context()
        enter_task(loop, task)
        try:
            waits_for = context.run(coro.send, None)
        except StopIteration:
            if not first_step_callbacks or task not in first_step_callbacks:
                return None  # ended: nothing was scheduled, nothing registered
            waits_for = _ENDED  # callbacks wait for it: it ends as a task, at once
        except BaseException:
            first_step_callbacks.pop(task, None)  # what the caller gets instead of a task
            raise
        finally:
            leave_task(loop, task)
        # It waits: the task becomes a real one, which goes on from where it stands.
        become_task(task, _Resumed(coro, waits_for), loop, context, name)
        return task


enter_task: Callable[[asyncio.AbstractEventLoop, Any], None] = asyncio.tasks._enter_task
leave_task: Callable[[asyncio.AbstractEventLoop, Any], None] = asyncio.tasks._leave_task
_init_task = asyncio.Task.__init__


class _Starting(asyncio.Task):  # type: ignore[type-arg]
    """A job's task that may take its first step before it is initialized (start_now).
    Until then asyncio's C methods that need its loop raise RuntimeError, and get_coro()
    would read a field not yet set: it answers with the job's coroutine instead.
    `job` is the job it runs where the dispatcher's plain lane made it: its claimed row
    during the first step (the task has no name yet: get_name() makes it from the
    row's id), its Job once it waits."""

    __slots__ = ("_started", "job")
    _started: JobRun
    job: Any

    def get_coro(self) -> Any:
        return self._started

    def get_name(self) -> str:
        name = super().get_name()
        if name is None:  # a plain lane's task in its first step: named when it waits
            return f"{JOB_TASK_PREFIX}{self.job[0]}"  # its claimed row: the id first
        return name

    def get_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            return asyncio.get_running_loop()  # where its first step runs
        return super().get_loop()

    def add_done_callback(
        self, fn: Callable[[Any], object], *, context: contextvars.Context | None = None
    ) -> None:
        if self._loop is not None:
            super().add_done_callback(fn, context=context)
            return
        # Added during the first step: kept until the task is initialized (start_now
        # initializes it, at once, even when the job ended in that step).
        first_step_callbacks.setdefault(self, []).append((fn, context))

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        if self._loop is not None:
            return super().remove_done_callback(fn)
        kept = first_step_callbacks.get(self, [])
        left = [(f, c) for f, c in kept if f != fn]
        first_step_callbacks[self] = left
        return len(kept) - len(left)

    def __repr__(self) -> str:
        if self._loop is None:
            return f"<Task starting name={self.get_name()!r} coro={self._started!r}>"
        return super().__repr__()


class _Resumed(Coroutine[Any, Any, Any]):
    """What a task started by start_now runs: the rest of the job's coroutine. Its first
    send hands the task what the first step waited for (a future, or None for a bare
    yield); then each send and throw goes to the job's coroutine. A throw may come
    first (the task was cancelled before its first turn): it goes there too."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: JobRun, waits_for: Any) -> None:
        self._coro = coro
        self._first: Any = waits_for

    def send(self, value: Any) -> Any:
        first = self._first
        if first is not _TAKEN:
            self._first = _TAKEN
            if first is _ENDED:
                raise StopIteration
            return first
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        self._first = _TAKEN
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        raise TypeError("a job's resumed coroutine is run by its task, not awaited")

    # What asyncio reads of a task's coroutine for its repr and get_stack().
    @property
    def cr_frame(self) -> Any:
        return self._coro.cr_frame  # type: ignore[attr-defined]

    @property
    def cr_code(self) -> Any:
        return self._coro.cr_code  # type: ignore[attr-defined]

    @property
    def cr_running(self) -> bool:
        return bool(self._coro.cr_running)  # type: ignore[attr-defined]


_TAKEN: Any = object()  # _Resumed's first value was handed over
_ENDED: Any = object()  # the job ended in its first step: _Resumed ends its task at once

# Done callbacks added to a task during its first step, by task (start_now adds them
# once it is initialized).
first_step_callbacks: dict[
    _Starting, list[tuple[Callable[[Any], object], contextvars.Context | None]]
] = {}


# -- the dispatcher's plain lane (CPython 3.11-3.13): its first steps, written out -----
#
# plain_lane.start_plain runs each job's handler coroutine itself in a _Starting task,
# with no coroutine of ours around it: a job that ends in that step costs no more. One
# that waits becomes a task here, running the rest of the handler's coroutine through a
# Finishing, which tells the dispatcher how it ended.

new_starting: Callable[[], _Starting] = functools.partial(_Starting.__new__, _Starting)


def become_task(
    task: _Starting,
    rest: Any,
    loop: asyncio.AbstractEventLoop,
    context: contextvars.Context,
    name: str,
) -> None:
    """Initialize a task after its first step (start_now, the plain lane): it runs `rest`
    (a _Resumed, a Finishing) from now on. A cancel() made during that step (the
    handler's own) is made again: the initialization clears it; so are the done
    callbacks gathered meanwhile."""
    cancelled, message = task._must_cancel, task._cancel_message  # type: ignore[attr-defined]
    _init_task(task, rest, loop=loop, name=name, context=context)  # type: ignore[call-arg, unused-ignore]
    if cancelled:
        task.cancel(message)
    for callback, callback_context in first_step_callbacks.pop(task, ()):
        task.add_done_callback(callback, context=callback_context)


def ended_task(coro: Coroutine[Any, Any, Any]) -> Any:
    """What a plain lane's task runs when its job ended in its first step but the task
    gathered done callbacks: it ends at its first turn."""
    return _Resumed(coro, _ENDED)


class Finishing(_Resumed):
    """What a plain lane's task runs when its job's first step waited: the rest of the
    handler's coroutine (as _Resumed), then `ended(exception)` with how it ended: a
    StopIteration carrying what it returned, or what it raised. The task then ends with
    None, or with what `ended` raises (a CancelledError to propagate)."""

    __slots__ = ("_ended",)

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        waits_for: Any,
        ended: Callable[[BaseException], None],
    ) -> None:
        super().__init__(coro, waits_for)
        self._ended = ended

    def send(self, value: Any) -> Any:
        if self._first is not _TAKEN:
            first, self._first = self._first, _TAKEN
            return first
        try:
            return self._coro.send(value)
        except BaseException as exc:
            self._ended(exc)
        raise StopIteration

    def throw(self, *args: Any) -> Any:
        self._first = _TAKEN
        try:
            return self._coro.throw(*args)
        except BaseException as exc:
            self._ended(exc)
        raise StopIteration
