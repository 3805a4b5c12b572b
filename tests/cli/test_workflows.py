"""`aiopgq workflow ID` (the graph as a tree with statuses) and `aiopgq workflows`, as
an operator runs them, on a workflow enqueued through the public API."""

from __future__ import annotations

from aiopgq import JobContext, Queue

from .test_commands import aiopgq_cli


async def test_workflow_shows_the_graph_as_a_tree_and_workflows_lists_them(
    dsn: str, queue: Queue
) -> None:
    @queue.task(name="cli.step")
    async def step(ctx: JobContext, n: int) -> int:
        return n

    wf = queue.workflow("nightly")
    a = wf.add(step, 1)
    pages = wf.add_many(step, [{"n": n} for n in range(4)], depends_on=[a], name="pages")
    index = wf.add(step, 2, depends_on=[a])
    wf.add(step, 3, depends_on=[pages, index])
    wid = await wf.enqueue()
    env = {"AIOPGQ_DSN": dsn}
    shown = aiopgq_cli("workflow", str(wid), "--schema", queue.schema, env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"workflow {wid} nightly: running")
    assert "pending 1, waiting 6" in lines[0]
    jobs = (await queue.get_workflow(wid)).jobs
    first, last = jobs[0].id, jobs[-1].id
    assert f"pending   cli.step #{first}" in lines[1]
    assert any("group pages" in line and "4 x cli.step" in line for line in lines)
    assert sum(f"cli.step #{last}" in line for line in lines) == 2  # under both parents
    assert any(f"cli.step #{last} (shown above)" in line for line in lines)

    async with queue.worker(poll_interval=0.05):
        await queue.wait_for_workflow(wid, timeout=30)
    listed = aiopgq_cli("workflows", "--schema", queue.schema, env=env)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "nightly" in line)
    assert row.split()[:4] == [str(wid), "nightly", "done", "7"]
    assert "done 7" in row
    done = aiopgq_cli("workflow", str(wid), "--schema", queue.schema, env=env)
    assert "nightly: done" in done.stdout and "waiting" not in done.stdout

    missing = aiopgq_cli("workflow", "999999", "--schema", queue.schema, env=env)
    assert missing.returncode == 1 and "no workflow with id 999999" in missing.stderr
    bad = aiopgq_cli("workflows", "--limit", "0", "--schema", queue.schema, env=env)
    assert bad.returncode == 2 and "--limit must be at least 1" in bad.stderr
