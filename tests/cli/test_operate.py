"""The operator's commands: jobs, job, retry, cancel, pause, resume (through the CLI)."""

from __future__ import annotations

import json

from aiopgq import JobStatus, Queue, Retry

from ..support.cli import run_cli


async def test_jobs_job_and_retry_commands(dsn: str, queue: Queue) -> None:
    @queue.task(name="cli.fails", max_attempts=2, retry=Retry(base=0, jitter=0))
    async def fails(order: int) -> None:  # enqueued by name, into two queues
        raise ConnectionError(f"smtp down for order {order}")

    failed = await queue.enqueue("cli.fails", {"order": 42}, queue="mail")
    other = await queue.enqueue("cli.fails", {"order": 7}, queue="other")
    pending = await queue.enqueue("cli.later", {"x": 1}, delay=3600)
    worker = queue.worker(queues=["mail", "other"])
    await worker.run(burst=True)
    assert (await queue.get_job(failed.id)).status is JobStatus.FAILED

    def cli(*args: str) -> tuple[int, str, str]:
        done = run_cli(dsn, queue.schema, "--schema", queue.schema, *args)
        return done.returncode, done.stdout, done.stderr

    code, out, err = cli("jobs", "--status", "failed", "--queue", "mail")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["id", "status", "queue"]
    assert len(lines) == 2 and lines[1].split()[:5] == [str(failed.id), "failed", "mail",
        "cli.fails", "2/2"]  # fmt: skip
    assert lines[1].endswith("ConnectionError: smtp down for order 42")
    code, out, _ = cli("jobs", "--limit", "2")
    assert [line.split()[0] for line in out.splitlines()[1:]] == [str(pending.id), str(other.id)]
    code, out, _ = cli("jobs", "--task", "nothing.here")
    assert out.splitlines()[-1] == "(no jobs)"

    code, out, err = cli("job", str(failed.id))
    assert code == 0, err
    for expected in ('"order": 42', "attempts:  2 of 2", "errors:    2", "--- attempt 1",
                     "--- attempt 2", "Traceback (most recent call last)",
                     "ConnectionError: smtp down for order 42", f"worker {worker.id}"):  # fmt: skip
        assert expected in out, (expected, out)
    code, out, _ = cli("job", str(failed.id), "--json")
    shown = json.loads(out)
    assert (shown["status"], shown["attempts"], shown["payload"]) == ("failed", 2, {"order": 42})
    assert [e["attempt"] for e in shown["errors"]] == [1, 2]
    code, _, err = cli("job", "999999")
    assert code == 1 and err.startswith(f"aiopgq: no job with id 999999 in schema {queue.schema}")

    code, out, _ = cli("retry", str(failed.id), str(pending.id))
    assert code == 0
    assert out.splitlines() == [
        f"re-queued job {failed.id}",
        f"job {pending.id} is pending: only failed or cancelled jobs are retried",
    ]
    requeued = await queue.get_job(failed.id)
    assert (requeued.status, requeued.attempts, len(requeued.errors)) == (JobStatus.PENDING, 0, 2)
    code, out, _ = cli("retry", "--all-failed")
    assert (code, out.strip()) == (0, "re-queued 1 failed job")
    assert (await queue.get_job(other.id)).status is JobStatus.PENDING


async def test_retry_cancel_pause_resume_refuse_bad_input_in_one_line(
    dsn: str, queue: Queue
) -> None:
    def cli(*args: str) -> tuple[int, str, str]:
        done = run_cli(dsn, queue.schema, "--schema", queue.schema, *args)
        return done.returncode, done.stdout, done.stderr

    usage = [
        (["retry"], "name the jobs to retry: ids, --queue Q, --task T or --all-failed"),
        (["retry", "1", "--all-failed"], "give job ids, or --queue/--task/--all-failed, not both"),
        (["retry", "--all-failed", "--queue", "q"], "--all-failed retries every failed job"),
        (["jobs", "--limit", "0"], "--limit must be at least 1"),
    ]
    for args, message in usage:
        code, _, err = cli(*args)
        assert code == 2 and err.startswith("aiopgq: ") and message in err, (args, err)
    code, _, err = cli("pause", "")
    assert code == 1 and err.startswith("aiopgq: queue name must be"), err
    code, out, err = cli("cancel", "31337")
    assert code == 1 and err.startswith(f"aiopgq: no job with id 31337 in schema {queue.schema}")

    job = await queue.enqueue("cli.x", {}, queue="held")
    code, out, _ = cli("pause", "held", "other")
    assert (code, out.splitlines()) == (0, ["paused queue held", "paused queue other"])
    assert await queue.paused_queues() == ["held", "other"]
    code, out, _ = cli("resume", "other")
    assert (code, out.strip()) == (0, "resumed queue other")
    assert await queue.paused_queues() == ["held"]
    code, out, _ = cli("cancel", str(job.id))
    assert (code, out.strip()) == (0, f"cancelled job {job.id}")
    code, out, _ = cli("retry", str(job.id))
    assert (code, out.strip()) == (0, f"re-queued job {job.id}")
