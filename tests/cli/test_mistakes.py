"""What a user who gets something wrong meets: exit status 2 for a mistake in what was
typed and 1 for a failure of the moment, one short line on stderr however long the
value typed, no empty queue name, and a quiet exit when the reader of the output leaves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import aiopgq
from aiopgq import Queue

ROOT = Path(__file__).resolve().parents[2]
LONG = "q" * 100_000
NOWHERE = "postgresql://127.0.0.1:1/nothing"  # no server listens on port 1


def run(*args: str, dsn: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AIOPGQ_DSN", "DATABASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    if dsn is not None:
        env["AIOPGQ_DSN"] = dsn
    return subprocess.run(
        [sys.executable, "-m", "aiopgq", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_short_line(stderr: str) -> str:
    """The error line of a failed command: one line, no traceback, not a wall of text."""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert lines and len(lines[-1]) < 400, stderr[:1000]
    return lines[-1]


async def registered(queue: Queue) -> None:
    """A worker of `queue` has recorded its task, so enqueue by name checks names."""

    @queue.task(name="mail.send")
    async def send(to: str) -> None:
        pass

    await queue.worker().run(burst=True)


MISTAKES = {
    "unknown task": (["enqueue", "mail.sned", "{}"], "no task named 'mail.sned'"),
    "bad argument": (
        ["enqueue", "mail.send", '{"to": "a", "cc": 1}'],
        "unexpected keyword argument",
    ),
    "priority out of range": (
        ["enqueue", "mail.send", '{"to": "a"}', "--priority", str(2**40)],
        "priority must fit in 32 bits",
    ),
    "negative delay": (
        ["enqueue", "mail.send", '{"to": "a"}', "--delay", "-1"],
        "delay must be between 0 and 10 years",
    ),
    "no attempt allowed": (
        ["enqueue", "mail.send", '{"to": "a"}', "--max-attempts", "0"],
        "max_attempts must be an int >= 1",
    ),
    "queue name too long": (
        ["enqueue", "mail.send", '{"to": "a"}', "--queue", LONG],
        "queue name must be a non-empty string",
    ),
    "empty queue name": (
        ["enqueue", "mail.send", '{"to": "a"}', "--queue", ""],
        "queue='' is an empty queue name",
    ),
    "limit out of range": (["queue", "mail", "--concurrency", "0"], "concurrency must be"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
async def test_a_mistake_exits_2_with_one_short_line(mistake: str, queue: Queue) -> None:
    await registered(queue)
    args, message = MISTAKES[mistake]
    done = run("--schema", queue.schema, *args, dsn=queue.dsn)
    assert done.returncode == 2, (done.returncode, done.stderr[:500])
    line = one_short_line(done.stderr)
    assert line.startswith("aiopgq: ") and message in line, line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dsn", NOWHERE, "--schema", "Bad-Name", "status"], "invalid schema name 'Bad-Name'"),
        (["--dsn", NOWHERE, "--schema", LONG, "status"], "(100000 characters)"),
        (["--dsn", "postgresql://db:99999999/x", "status"], "cannot parse the database URL"),
        (["--dsn", "mysql://db/x", "status"], "it must start with postgresql://"),
        (["--dsn", "mysql://db/" + LONG, "status"], "(100011 characters)"),
        (["enqueue", "t", "--priority", LONG], "(100000 characters)"),
        (["job", "twelve"], "invalid int value: 'twelve'"),
    ],
)
def test_a_bad_name_or_value_on_the_command_line_exits_2(args: list[str], message: str) -> None:
    done = run(*args)
    assert done.returncode == 2, (done.returncode, done.stderr[:500])
    assert message in one_short_line(done.stderr)


async def test_failures_of_the_moment_exit_1(dsn: str, schema: str) -> None:
    unreachable = run("--dsn", NOWHERE, "status")
    assert unreachable.returncode == 1
    assert f"cannot connect to {NOWHERE}" in one_short_line(unreachable.stderr)
    far = run("--dsn", f"{NOWHERE}?application_name={LONG}", "status")
    assert far.returncode == 1 and "cannot connect to" in one_short_line(far.stderr)
    unmigrated = run("--schema", schema, "status", dsn=dsn)
    assert unmigrated.returncode == 1 and "aiopgq migrate" in one_short_line(unmigrated.stderr)


def test_the_help_states_the_exit_statuses() -> None:
    text = run("--help").stdout
    assert "exit status:" in text
    for status in ("0", "1", "2", "130", "141"):
        assert f"\n  {status} " in text, status


async def test_long_values_are_cut_in_the_library_messages_too(queue: Queue) -> None:
    await registered(queue)
    for options in ({"queue": LONG}, {"concurrency_key": LONG}):
        with pytest.raises(ValueError) as info:
            await queue.enqueue("mail.send", {"to": "a"}, **options)  # type: ignore[arg-type]
        assert len(str(info.value)) < 300 and "(100000 characters)" in str(info.value)
    with pytest.raises(aiopgq.TaskNotFound) as unknown:
        await queue.enqueue(LONG, {})
    assert len(str(unknown.value)) < 600 and unknown.value.task == LONG
    with pytest.raises(TypeError) as argument:
        await queue.enqueue("mail.send", {LONG: 1})
    assert len(str(argument.value)) < 300
    with pytest.raises(aiopgq.ConfigurationError) as bad_schema:
        Queue(queue.dsn, schema=LONG)
    assert len(str(bad_schema.value)) < 300


async def test_an_empty_queue_name_is_refused_not_read_as_default(queue: Queue) -> None:
    @queue.task(name="t.own", queue="own")
    async def own() -> None:
        pass

    for enqueue in (
        lambda: queue.enqueue("t.any", {}, queue=""),
        lambda: queue.enqueue_many("t.any", [{}], queue=""),
        lambda: own.enqueue(queue=""),
    ):
        with pytest.raises(ValueError, match="queue='' is an empty queue name"):
            await enqueue()
    assert await queue.list_jobs() == []
    # None is "no queue given": the task's, else default.
    assert (await own.enqueue(queue=None)).queue == "own"
    assert (await queue.enqueue("t.any", {}, queue=None)).queue == "default"


async def test_a_reader_that_leaves_early_ends_the_command_quietly(queue: Queue) -> None:
    await queue.enqueue_many("t", [{}] * 3000)  # 3000 lines, far over a pipe's buffer
    leave_early(queue)


def leave_early(queue: Queue) -> None:
    env = {**os.environ, "AIOPGQ_DSN": queue.dsn or "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiopgq", "--schema", queue.schema, "jobs", "--limit", "3000"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip()  # like `| head -1`
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(60) == 141, stderr
    assert stderr == ""
