"""Property test: the job state machine under any interleaving of operations.

Hypothesis drives enqueue, fetch, complete, fail, retry, rescue, release, cancel
(of pending and running jobs), heartbeats, re-queueing of failed and cancelled jobs
and stale completions (from a worker whose jobs were rescued or cancelled meanwhile)
against the real SQL, and checks after every step that no job is lost, attempts
never exceed the cap, each job is in exactly the state the model predicts, and a
running job always has an owner while a pending one has none.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import asyncpg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aiopgq._db.arrays import int_array
from aiopgq._db.migrations import migrate
from aiopgq._db.statements import Statements

WORKERS = ("w1", "w2")


@dataclass
class ModelJob:
    status: str
    attempts: int
    max_attempts: int
    owner: str | None = None


def make_machine(dsn: str, schema: str) -> type[RuleBasedStateMachine]:
    loop = asyncio.new_event_loop()
    conn: asyncpg.Connection = loop.run_until_complete(asyncpg.connect(dsn))
    loop.run_until_complete(migrate(conn, schema))
    sql = Statements(schema)

    def run(coro):  # type: ignore[no-untyped-def]
        return loop.run_until_complete(coro)

    class JobStateMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            run(conn.execute(f'TRUNCATE "{schema}".jobs'))
            self.jobs: dict[int, ModelJob] = {}
            self.stale: list[tuple[str, int, int]] = []  # (worker, id, attempt) of lost claims

        @rule(max_attempts=st.integers(1, 3))
        def enqueue(self, max_attempts: int) -> None:
            row = run(conn.fetchrow(sql.insert_job, "t", "{}", "default", 0, None, max_attempts))
            self.jobs[row["id"]] = ModelJob("pending", 0, max_attempts)

        @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 4))
        def fetch(self, worker: str, limit: int) -> None:
            rows = run(conn.fetch(sql.dequeue, "default", limit, worker))
            pending = sorted(i for i, j in self.jobs.items() if j.status == "pending")
            # Every runnable job is claimable; none twice (order: test_priority_orders...).
            assert {r["id"] for r in rows} <= set(pending)
            assert len(rows) == min(limit, len(pending))
            for r in rows:
                job = self.jobs[r["id"]]
                job.status, job.owner, job.attempts = "running", worker, job.attempts + 1
                assert r["attempts"] == job.attempts

        @precondition(lambda self: any(j.status == "running" for j in self.jobs.values()))
        @rule(data=st.data(), limit=st.integers(0, 3))
        def fetch_with_a_completion(self, data: st.DataObject, limit: int) -> None:
            """A done outcome riding along with the owner's next dequeue."""
            job_id = data.draw(
                st.sampled_from(sorted(i for i, j in self.jobs.items() if j.status == "running"))
            )
            job = self.jobs[job_id]
            worker = job.owner
            pending = {i for i, j in self.jobs.items() if j.status == "pending"}
            rows = run(
                conn.fetch(
                    sql.claim(several_queues=False, completing=True),
                    "default",
                    limit,
                    worker,
                    int_array([job_id]),
                    int_array([job.attempts]),
                    "{}",
                )
            )
            job.status, job.owner = "done", None
            assert {r["id"] for r in rows} <= pending
            assert len(rows) == min(limit, len(pending))
            for r in rows:
                claimed = self.jobs[r["id"]]
                claimed.status, claimed.owner = "running", worker
                claimed.attempts += 1

        @precondition(lambda self: any(j.status == "running" for j in self.jobs.values()))
        @rule(data=st.data(), outcome=st.sampled_from(["done", "error", "final", "release"]))
        def finish(self, data: st.DataObject, outcome: str) -> None:
            job_id = data.draw(
                st.sampled_from(sorted(i for i, j in self.jobs.items() if j.status == "running"))
            )
            job = self.jobs[job_id]
            worker = job.owner
            assert worker is not None
            self._write(worker, job_id, job.attempts, outcome)
            if outcome == "done":
                job.status = "done"
            elif outcome == "release":
                job.status, job.attempts = "pending", job.attempts - 1
            elif outcome == "final" or job.attempts >= job.max_attempts:
                job.status = "failed"
            else:
                job.status = "pending"
            job.owner = None

        def _write(self, worker: str, job_id: int, attempt: int, outcome: str) -> None:
            ids, attempts = int_array([job_id]), int_array([attempt])
            if outcome == "done":
                run(conn.execute(sql.complete_done, ids, attempts, "{}", worker))
            elif outcome == "ride":  # a done outcome on a dequeue that claims nothing
                ride = sql.claim(several_queues=True, completing=True)
                run(conn.fetch(ride, ["default"], 0, worker, ids, attempts, "{}"))
            elif outcome == "release":
                run(conn.execute(sql.release, [job_id], [attempt], worker, schema))
            else:
                run(
                    conn.fetch(
                        sql.complete_error,
                        [job_id],
                        [attempt],
                        [0.0],
                        ["boom"],
                        [outcome == "final"],
                        worker,
                    )
                )

        @rule()
        def rescue_everything(self) -> None:
            """Every worker died: all leases expire."""
            run(
                conn.execute(
                    f"UPDATE \"{schema}\".jobs SET heartbeat_at = now() - interval '1 hour' "
                    "WHERE status = 'running'"
                )
            )
            run(conn.fetch(sql.rescue, 60.0, 1000))
            for job_id, job in self.jobs.items():
                if job.status == "running":
                    assert job.owner is not None
                    self.stale.append((job.owner, job_id, job.attempts))
                    job.status = "failed" if job.attempts >= job.max_attempts else "pending"
                    job.owner = None

        @precondition(lambda self: bool(self.stale))
        @rule(
            data=st.data(), outcome=st.sampled_from(["done", "ride", "error", "final", "release"])
        )
        def stale_completion(self, data: st.DataObject, outcome: str) -> None:
            """A worker that lost its lease reports late: nothing may change."""
            worker, job_id, attempt = data.draw(st.sampled_from(self.stale))
            self._write(worker, job_id, attempt, outcome)

        @precondition(lambda self: bool(self.jobs))
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(sorted(self.jobs)))
            row = run(conn.fetchrow(sql.cancel, job_id, schema))
            job = self.jobs[job_id]
            assert row["cancelled"] is (job.status in ("pending", "running"))
            if not row["cancelled"]:
                return
            assert row["was"] == job.status
            if job.status == "running":  # its worker's outcome must now change nothing
                assert job.owner is not None
                self.stale.append((job.owner, job_id, job.attempts))
            job.status = "cancelled"  # a running job keeps its owner: the worker it ran on

        @rule(worker=st.sampled_from(WORKERS))
        def heartbeat(self, worker: str) -> None:
            """A worker beats for the jobs it believes it runs: it renews the leases of those
            still running as its own, and hears which are not (lost), and which of those
            were cancelled."""
            held = sorted(
                {i for i, j in self.jobs.items() if j.owner == worker}
                | {i for w, i, _ in self.stale if w == worker}
            )
            row = run(conn.fetchrow(sql.heartbeat, held, worker))
            ours = [
                i for i in held if (self.jobs[i].status, self.jobs[i].owner) == ("running", worker)
            ]
            assert sorted(row["renewed"]) == ours
            assert sorted(row["lost"]) == [i for i in held if i not in ours]
            cancelled = [i for i in held if self.jobs[i].status == "cancelled"]
            assert sorted(row["cancelled"]) == cancelled

        @precondition(
            lambda self: any(j.status in ("failed", "cancelled") for j in self.jobs.values())
        )
        @rule(data=st.data())
        def retry(self, data: st.DataObject) -> None:
            finished = sorted(
                i for i, j in self.jobs.items() if j.status in ("failed", "cancelled")
            )
            job_id = data.draw(st.sampled_from(finished))
            row = run(conn.fetchrow(sql.retry_jobs, [job_id], ["failed", "cancelled"], schema))
            assert list(row["ids"]) == [job_id]
            job = self.jobs[job_id]
            job.status, job.attempts, job.owner = "pending", 0, None
            # Attempts restart: a run that lost its lease (cancelled or rescued) shares
            # its lease token with the same attempt of the job's next run on the same
            # worker. The worker stops such a run when the job comes back to it
            # (aiopgq/_worker/dispatcher.py), so the model stops sending its outcomes.
            self.stale = [s for s in self.stale if s[1] != job_id]

        @invariant()
        def database_matches_model(self) -> None:
            rows = run(
                conn.fetch(
                    "SELECT id, status::text, attempts, max_attempts, locked_by "
                    f'FROM "{schema}".jobs'
                )
            )
            assert {r["id"] for r in rows} == set(self.jobs)  # no job lost or invented
            for r in rows:
                job = self.jobs[r["id"]]
                assert r["attempts"] <= r["max_attempts"]
                assert (r["status"], r["attempts"], r["locked_by"]) == (
                    job.status,
                    job.attempts,
                    job.owner,
                )
                if r["status"] != "cancelled":  # a job cancelled while running keeps its owner
                    assert (r["status"] == "running") == (r["locked_by"] is not None)

    JobStateMachine.closer = lambda: (run(conn.close()), loop.close())  # type: ignore[attr-defined]
    return JobStateMachine


def test_job_state_machine(dsn: str) -> None:
    schema = f"t_sm_{uuid.uuid4().hex[:10]}"
    machine = make_machine(dsn, schema)
    try:
        test_case = machine.TestCase
        test_case.settings = settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        test_case().runTest()
    finally:

        async def drop() -> None:
            c = await asyncpg.connect(dsn)
            await c.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await c.close()

        machine.closer()  # type: ignore[attr-defined]
        asyncio.run(drop())
