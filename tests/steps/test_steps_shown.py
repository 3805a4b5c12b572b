"""What `Queue.job_steps` and `aiopgq job` show of a job's steps and waits."""

from __future__ import annotations

import json

from aiopgq import JobContext, Queue

from ..support.cli import run_cli


async def test_job_steps_and_the_cli_show_steps_and_waits(dsn: str, queue: Queue) -> None:
    @queue.task(name="sh.order")
    async def order(ctx: JobContext) -> None:
        await ctx.step("reserve", lambda: "r-1")
        await ctx.wait_event("payment:42", timeout=3600)

    @queue.task(name="sh.remind")
    async def remind(ctx: JobContext) -> None:
        await ctx.step("welcome", lambda: None)
        await ctx.sleep(3600)

    waiting, sleeping = await order.enqueue(), await remind.enqueue()
    await queue.worker().run(burst=True)

    steps = await queue.job_steps(waiting.id)
    assert [(s.name, s.kind, s.attempt) for s in steps.steps] == [("reserve", "step", 1)]
    assert steps.event == "payment:42" and steps.event_timeout is not None
    assert steps.waiting_for is not None and steps.waiting_for.startswith("event payment:42")
    slept = await queue.job_steps(sleeping.id)
    assert [s.kind for s in slept.steps] == ["step", "sleep"]
    assert slept.sleeping_until is not None and slept.sleeping_until == slept.steps[1].until
    assert slept.steps[0].duration >= 0

    done = run_cli(dsn, queue.schema, "--schema", queue.schema, "job", str(waiting.id))
    assert done.returncode == 0, done.stderr
    assert "waits for: event payment:42 (until" in done.stdout
    assert "step:      reserve (step, attempt 1," in done.stdout
    done = run_cli(dsn, queue.schema, "--schema", queue.schema, "job", str(sleeping.id))
    assert "waits for: sleep until" in done.stdout
    assert "step:      sleep:1 (sleep, attempt 1," in done.stdout
    done = run_cli(dsn, queue.schema, "--schema", queue.schema, "job", str(sleeping.id), "--json")
    shown = json.loads(done.stdout)
    assert [s["name"] for s in shown["steps"]] == ["welcome", "sleep:1"]
    assert shown["waiting_for"]["sleeping_until"] is not None
