"""ctx.step: run once per job, replayed from storage on every later run."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from aiopgq import JobContext, JobStatus, LeaseLost, Queue, Retry, StepMismatch

NOW = Retry(base=0, jitter=0)


async def test_a_retry_replays_completed_steps(queue: Queue) -> None:
    calls: list[str] = []

    async def fetch(url: str) -> list[int]:
        calls.append(f"fetch {url}")
        return [1, 2, 3]

    def transform(rows: list[int], *, factor: int) -> list[int]:  # a sync step: in a thread
        calls.append("transform")
        return [r * factor for r in rows]

    @queue.task(name="st.import", retry=NOW)
    async def importer(ctx: JobContext, url: str) -> int:
        rows = await ctx.step("fetch", fetch, url)
        doubled = await ctx.step("transform", transform, rows, factor=2)
        if ctx.attempt < 3:
            raise RuntimeError(f"load failed on attempt {ctx.attempt}")
        return sum(await ctx.step("load", lambda: doubled))

    job = await importer.enqueue(url="u")
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == 12 and done.attempts == 3
    assert calls == ["fetch u", "transform"]  # once each, over three attempts


async def test_a_step_that_raises_is_not_recorded(queue: Queue) -> None:
    calls: list[int] = []

    async def flaky(ctx: JobContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("upstream down")
        return "ok"

    @queue.task(name="st.flaky", retry=NOW)
    async def task(ctx: JobContext) -> str:
        return str(await ctx.step("call", flaky, ctx))

    job = await task.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).result == "ok"
    assert calls == [1, 2]


async def test_names_are_unique_within_a_run(queue: Queue) -> None:
    errors: list[BaseException] = []

    @queue.task(name="st.twice", max_attempts=1)
    async def twice(ctx: JobContext) -> None:
        await ctx.step("a", lambda: 1)
        try:
            await ctx.step("a", lambda: 2)
        except ValueError as exc:
            errors.append(exc)
            raise

    await twice.enqueue()
    await queue.worker().run(burst=True)
    [error] = errors
    assert "used twice in one run" in str(error)


async def test_a_changed_sequence_is_an_error_not_a_silent_reuse(queue: Queue) -> None:
    errors: list[BaseException] = []

    @queue.task(name="st.changed", retry=NOW, max_attempts=2)
    async def changed(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            await ctx.step("reserve", lambda: "r")
            raise RuntimeError("crash after reserve")
        try:
            await ctx.step("charge", lambda: "c")  # a new deploy: another first step
        except StepMismatch as exc:
            errors.append(exc)
            raise

    job = await changed.enqueue()
    await queue.worker().run(burst=True)
    [error] = errors
    assert "step 1 of this run is step 'charge'" in str(error)
    assert "recorded step 'reserve'" in str(error)
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED


async def test_a_step_in_a_transaction_commits_with_its_record(queue: Queue, ledger: str) -> None:
    async def pay(ctx: JobContext, fail_after: bool) -> str:
        async with ctx.transaction() as conn:
            await conn.execute(
                f"INSERT INTO {ledger} (job_id, attempt, task) VALUES ($1, $2, 'pay')",
                ctx.job_id,
                ctx.attempt,
            )
        if fail_after:  # still inside the step: the row rolls back with it
            raise RuntimeError("step failed after its transaction block")
        return "paid"

    @queue.task(name="st.pay", retry=NOW)
    async def order(ctx: JobContext) -> str:
        paid = await ctx.step("pay", pay, ctx, ctx.attempt == 1)
        if ctx.attempt < 3:
            raise RuntimeError("later step failed")
        return str(paid)

    job = await order.enqueue()
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == "paid"
    rows = await queue.pool.fetch(f"SELECT attempt FROM {ledger}")
    assert [r["attempt"] for r in rows] == [2]  # attempt 1 rolled back, 3 replayed


async def test_a_fenced_run_does_not_record_and_rolls_back(queue: Queue, ledger: str) -> None:
    errors: list[BaseException] = []

    async def work(ctx: JobContext) -> int:
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {ledger} (job_id) VALUES ($1)", ctx.job_id)
        # Meanwhile the job was rescued and claimed elsewhere: this run's lease is gone.
        await queue.pool.execute(
            f'UPDATE "{queue.schema}".jobs SET attempts = attempts + 1, locked_by = $2 '
            "WHERE id = $1",
            ctx.job_id,
            "another-worker",
        )
        return 1

    @queue.task(name="st.fenced")
    async def fenced(ctx: JobContext) -> None:
        try:
            await ctx.step("work", work, ctx)
        except LeaseLost as exc:
            errors.append(exc)
            raise

    job = await fenced.enqueue()
    await queue.worker().run(burst=True)
    [error] = errors
    assert "was not recorded" in str(error)
    assert await queue.pool.fetchval(f"SELECT count(*) FROM {ledger}") == 0
    assert (
        await queue.pool.fetchval(
            f'SELECT count(*) FROM "{queue.schema}".job_steps WHERE job_id = $1', job.id
        )
        == 0
    )


async def test_the_run_that_loses_the_race_replays_the_winner(
    queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    """Two runs of one job in one step: the second INSERT waits for the first's commit,
    writes nothing, rolls its work back and returns the recorded value."""

    async def work(ctx: JobContext) -> str:
        async with ctx.transaction() as tx:
            await tx.execute(f"INSERT INTO {ledger} (job_id) VALUES ($1)", ctx.job_id)
        # Another run recorded this step meanwhile (committed before ours).
        await conn.execute(
            f'INSERT INTO "{queue.schema}".job_steps (job_id, "position", name, result, '
            "attempt, started_at) VALUES ($1, 0, 'work', '\"theirs\"', 1, now())",
            ctx.job_id,
        )
        return "ours"

    @queue.task(name="st.race")
    async def race(ctx: JobContext) -> str:
        return str(await ctx.step("work", work, ctx))

    job = await race.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).result == "theirs"
    assert await queue.pool.fetchval(f"SELECT count(*) FROM {ledger}") == 0


async def test_unstorable_values_and_bad_arguments(queue: Queue) -> None:
    errors: list[str] = []

    @queue.task(name="st.bad", max_attempts=1)
    async def bad(ctx: JobContext) -> None:
        for call in (
            ctx.step("set", lambda: {1, 2}),
            ctx.step("", lambda: 1),
            ctx.step("notcallable", 3),  # type: ignore[arg-type]
        ):
            try:
                await call
            except (TypeError, ValueError) as exc:
                errors.append(type(exc).__name__)

    await bad.enqueue()
    await queue.worker().run(burst=True)
    assert errors == ["TypeError", "ValueError", "TypeError"]


@pytest.mark.parametrize("hold", [True])
async def test_not_in_hold_transaction_mode(queue: Queue, hold: bool) -> None:
    from aiopgq import ConfigurationError

    errors: list[BaseException] = []

    @queue.task(name="st.hold", max_attempts=1)
    async def held(ctx: JobContext) -> None:
        try:
            await ctx.step("a", lambda: 1)
        except ConfigurationError as exc:
            errors.append(exc)

    await held.enqueue()
    await queue.worker(hold_transaction=hold).run(burst=True)
    [error] = errors
    assert "hold_transaction=True" in str(error)


async def test_a_step_cancelled_by_the_task_timeout_rolls_back(queue: Queue, ledger: str) -> None:
    async def slow(ctx: JobContext) -> None:
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {ledger} (job_id) VALUES ($1)", ctx.job_id)
        await asyncio.sleep(30)  # the task's timeout cancels the step here

    @queue.task(name="st.timeout", max_attempts=1, timeout=0.3)
    async def timed(ctx: JobContext) -> None:
        await ctx.step("slow", slow, ctx)

    job = await timed.enqueue()
    await queue.worker().run(burst=True)
    failed = await queue.get_job(job.id)
    assert failed.status is JobStatus.FAILED and "timeout" in (failed.last_error or "")
    assert await queue.pool.fetchval(f"SELECT count(*) FROM {ledger}") == 0


async def test_one_transaction_per_step(queue: Queue, ledger: str) -> None:
    errors: list[str] = []

    async def twice(ctx: JobContext) -> int:
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {ledger} (job_id) VALUES ($1)", ctx.job_id)
            try:
                async with ctx.transaction():
                    pass
            except RuntimeError as exc:
                errors.append(str(exc))
        return 1

    @queue.task(name="st.twice_tx", max_attempts=1)
    async def task(ctx: JobContext) -> int:
        first = await ctx.step("a", twice, ctx)
        async with ctx.transaction() as conn:  # outside a step: commits the job's done
            await conn.execute(f"INSERT INTO {ledger} (job_id) VALUES ($1)", ctx.job_id)
            ctx.set_result(first + 1)
        return 0

    job = await task.enqueue()
    await queue.worker().run(burst=True)
    assert len(errors) == 1 and "opened ctx.transaction() twice" in errors[0]
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == 2
    assert await queue.pool.fetchval(f"SELECT count(*) FROM {ledger}") == 2


async def test_a_last_step_is_written_with_the_done(queue: Queue) -> None:
    """A step that is the handler's last action costs no statement of its own: its row
    commits in the transaction that marks the job done."""

    @queue.task(name="st.last")
    async def send(ctx: JobContext, to: str) -> str:
        return str(await ctx.step("send", lambda: f"sent to {to}"))

    job = await send.enqueue(to="ada")
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == "sent to ada"
    step_xmin, step_result = await queue.pool.fetchrow(
        f'SELECT xmin::text, result FROM "{queue.schema}".job_steps WHERE job_id = $1', job.id
    )
    job_xmin = await queue.pool.fetchval(
        f'SELECT xmin::text FROM "{queue.schema}".jobs WHERE id = $1', job.id
    )
    assert step_xmin == job_xmin  # one transaction for both
    assert step_result == '"sent to ada"'


async def test_a_step_is_recorded_while_the_handler_goes_on(queue: Queue) -> None:
    calls: list[int] = []
    seen: list[int] = []

    @queue.task(name="st.goes_on", retry=NOW)
    async def task(ctx: JobContext) -> int:
        value = int(await ctx.step("charge", lambda: calls.append(ctx.attempt) or 7))
        await asyncio.sleep(0.3)  # other work: the row is written meanwhile
        seen.append(
            await queue.pool.fetchval(
                f'SELECT count(*) FROM "{queue.schema}".job_steps WHERE job_id = $1', ctx.job_id
            )
        )
        if ctx.attempt == 1:
            raise RuntimeError("later work failed")
        return value

    job = await task.enqueue()
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == 7 and done.attempts == 2
    assert seen == [1, 1] and calls == [1]  # recorded before the failure; replayed after


@pytest.mark.parametrize("ending", ["raises", "times out"])
async def test_a_run_that_ends_right_after_a_step_records_it(queue: Queue, ending: str) -> None:
    calls: list[int] = []

    @queue.task(name="st.ends", retry=NOW, max_attempts=2, timeout=0.5)
    async def task(ctx: JobContext) -> str:
        await ctx.step("charge", lambda: calls.append(ctx.attempt))
        if ctx.attempt == 1:
            if ending == "raises":
                raise RuntimeError("failed right after the step")
            await asyncio.sleep(30)  # the task's timeout cancels the run here
        return "ok"

    job = await task.enqueue()
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.attempts == 2
    assert calls == [1]  # the second run replayed the step


async def test_a_step_of_a_fenced_run_is_not_recorded(queue: Queue) -> None:
    """A step without database work in a run that lost its lease: no row, and the run
    learns it at its next step (LeaseLost), as it would have at the step itself."""
    errors: list[BaseException] = []

    async def fence(ctx: JobContext) -> int:
        await queue.pool.execute(
            f'UPDATE "{queue.schema}".jobs SET attempts = attempts + 1, locked_by = $2 '
            "WHERE id = $1",
            ctx.job_id,
            "another-worker",
        )
        return 1

    @queue.task(name="st.fenced_plain")
    async def task(ctx: JobContext) -> None:
        await ctx.step("fenced", fence, ctx)
        try:
            await ctx.step("next", lambda: 2)
        except LeaseLost as exc:
            errors.append(exc)
            raise

    job = await task.enqueue()
    await queue.worker().run(burst=True)
    [error] = errors
    assert "'fenced' was not recorded" in str(error)
    count = await queue.pool.fetchval(
        f'SELECT count(*) FROM "{queue.schema}".job_steps WHERE job_id = $1', job.id
    )
    assert count == 0


async def test_an_unstorable_result_after_a_step_fails_the_job_and_keeps_the_step(
    queue: Queue,
) -> None:
    @queue.task(name="st.unstorable_result", max_attempts=1)
    async def task(ctx: JobContext) -> object:
        await ctx.step("charge", lambda: "charged")
        return {1, 2}  # not JSON

    job = await task.enqueue()
    await queue.worker().run(burst=True)
    failed = await queue.get_job(job.id)
    assert failed.status is JobStatus.FAILED and "JSON" in (failed.last_error or "")
    count = await queue.pool.fetchval(
        f'SELECT count(*) FROM "{queue.schema}".job_steps WHERE job_id = $1', job.id
    )
    assert count == 1  # a retry of the job (queue.retry) does not charge again
