"""The doctor's checks of sessions, the jobs table, leases and NOTIFY (doctor.py runs them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._db.connection import Connection
from .queries import OpsStatements

Verdict = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Settings:
    """When a finding needs action."""

    idle_threshold: float = 30.0  # seconds a transaction may stay open
    lock_threshold: float = 1.0  # seconds a statement may wait on a lock
    lease_threshold: float = 60.0  # seconds without heartbeat (default visibility timeout x2)
    notify_threshold: float = 0.1  # fraction of the NOTIFY queue in use
    dead_ratio: float = 0.2  # dead row versions, as a share of the table...
    dead_minimum: int = 10_000  # ...and at least this many


@dataclass
class Check:
    """One check's finding: a verdict, one line, the details, and what to do."""

    name: str  # stable, for machines: "claim_plan"
    title: str  # for people: "claim plan"
    verdict: Verdict
    summary: str
    details: list[str] = field(default_factory=list)
    fix: str | None = None
    facts: list[dict[str, Any]] = field(default_factory=list)  # the rows behind it


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _who(pid: int, application: str | None, user: str | None) -> str:
    return f"pid {pid} ({application or 'no application_name'}, user {user or '?'})"


async def _sees_every_session(conn: Connection) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT pg_has_role(current_user, 'pg_read_all_stats', 'member') "
            "OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        )
    )


_HIDDEN = (
    "this role sees the details of its own sessions only: grant it pg_read_all_stats "
    "to check everyone's"
)


async def blocked_sessions(conn: Connection, ops: OpsStatements, threshold: float) -> Check:
    """Sessions waiting on a lock past `threshold` seconds, and who blocks them."""
    rows = await conn.fetch(ops.doctor_blocked, threshold)
    title = "blocked sessions"
    hidden = [] if await _sees_every_session(conn) else [_HIDDEN]
    if not rows:
        summary = f"no session has waited on a lock for more than {threshold:g} s"
        return Check("locks", title, "ok", summary, hidden)
    details: list[str] = []
    blockers: list[int] = []
    waiting: set[int] = set()
    for row in rows:
        if row["pid"] not in waiting:
            waiting.add(row["pid"])
            details.append(
                f"{_who(row['pid'], row['application_name'], row['usename'])} has waited "
                f"{row['waiting']:.1f} s for a {row['wait_event']} lock: {row['query']}"
            )
        age = row["blocker_xact_age"]
        blocker = _who(row["blocker_pid"], row["blocker_application"], row["blocker_user"])
        details.append(
            f"  blocked by {blocker}, {row['blocker_state']}"
            + ("" if age is None else f", its transaction {age:.0f} s old")
            + f": {row['blocker_query']}"
        )
        if row["blocker_pid"] not in blockers:
            blockers.append(row["blocker_pid"])
    pids = ", ".join(str(pid) for pid in blockers)
    fix = (
        "end the blocking transactions (commit or roll back in their application); to "
        f"end them now: SELECT pg_terminate_backend(pid) FROM unnest('{{{pids}}}'::int[]) pid"
    )
    summary = f"{_count(len(waiting), 'session')} waiting on locks held by pid {pids}"
    return Check("locks", title, "fail", summary, details + hidden, fix, [dict(r) for r in rows])


async def long_transactions(conn: Connection, ops: OpsStatements, threshold: float) -> Check:
    """Transactions open past `threshold` seconds: active, or idle in transaction."""
    rows = await conn.fetch(ops.doctor_sessions, threshold)
    title = "long transactions"
    hidden = [] if await _sees_every_session(conn) else [_HIDDEN]
    if not rows:
        summary = f"no transaction has been open for more than {threshold:g} s"
        return Check("transactions", title, "ok", summary, hidden)
    details = []
    for row in rows:
        state = row["state"] or "?"
        doing = (
            f"{state} for {row['state_age']:.0f} s"
            if state.startswith("idle in transaction")
            else f"{state}, running for {row['state_age']:.0f} s"
        )
        xmin = (
            f"holds back xmin {row['xmin']} ({row['xmin_age']} transactions ago)"
            if row["xmin"] is not None
            else "holds no snapshot now"
        )
        source = f" from {row['client_addr']}" if row["client_addr"] else ""
        details.append(
            f"{_who(row['pid'], row['application_name'], row['usename'])}{source}: {doing}, "
            f"transaction {row['xact_age']:.0f} s old, {xmin}; last query: {row['query']}"
        )
    pids = ", ".join(str(row["pid"]) for row in rows)
    fix = (
        "commit or roll back in the application that holds them (vacuum cannot remove dead "
        "jobs rows newer than their xmin meanwhile); to end them now: SELECT "
        f"pg_terminate_backend(pid) FROM unnest('{{{pids}}}'::int[]) pid; to have PostgreSQL "
        "end idle ones itself: ALTER DATABASE ... SET idle_in_transaction_session_timeout = '60s'"
    )
    summary = f"{_count(len(rows), 'transaction')} open for more than {threshold:g} s (pid {pids})"
    return Check(
        "transactions", title, "warn", summary, details + hidden, fix, [dict(r) for r in rows]
    )


async def table_health(conn: Connection, ops: OpsStatements, settings: Settings) -> Check:
    """Dead row versions, last (auto)vacuum, and the settings of the jobs table."""
    row = await conn.fetchrow(ops.doctor_table)
    assert row is not None
    title = "jobs table"
    table = f'"{ops.schema}".jobs'
    live, dead = row["n_live_tup"] or 0, row["n_dead_tup"] or 0
    options = list(row["reloptions"])
    vacuumed = row["vacuum_age"]
    details = [
        f"{live} live and {dead} dead row versions, {row['total_bytes'] / 2**20:.1f} MiB "
        "with indexes",
        "last vacuum: "
        + ("never" if vacuumed is None else f"{vacuumed:.0f} s ago")
        + f" (autovacuum ran {row['autovacuum_count'] or 0} times since statistics reset)",
        "settings: " + (", ".join(options) or "none (server defaults)"),
    ]
    problems, fixes = [], []
    if not row["autovacuum"]:
        problems.append("autovacuum is off on this server")
        fixes.append(f"set autovacuum = on, or run VACUUM {table} on a schedule")
    if "autovacuum_enabled=false" in options:
        problems.append(f"autovacuum is disabled for {table}")
        fixes.append(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
    if dead > settings.dead_minimum and dead > settings.dead_ratio * (live + dead):
        problems.append(f"{dead} dead row versions, {dead / (live + dead):.0%} of the table")
        fixes.append(
            f"VACUUM (VERBOSE) {table}; if they come back, end the long transactions that hold "
            "back xmin (see above) and check the autovacuum settings"
        )
    facts = [{k: row[k] for k in row.keys()}]
    if problems:
        return Check("table", title, "warn", "; ".join(problems), details, "; ".join(fixes), facts)
    return Check(
        "table", title, "ok", f"{dead} dead row versions; autovacuum on", details, None, facts
    )


async def stale_leases(conn: Connection, ops: OpsStatements, threshold: float) -> Check:
    """Running jobs whose heartbeat is older than `threshold` seconds."""
    rows = await conn.fetch(ops.doctor_stale_leases, threshold)
    title = "stale leases"
    if not rows:
        return Check(
            "leases", title, "ok", f"no running job has missed its heartbeat for {threshold:g} s"
        )
    details, alive = [], False
    for row in rows:
        seen = row["last_seen_age"]
        if row["registered"]:
            whose = f"registered, last seen {seen:.0f} s ago"
            alive = alive or seen < threshold
        else:
            whose = "gone from the workers registry"
        details.append(
            f"{_count(row['jobs'], 'job')} held by {row['locked_by']} (job {row['first_job']} "
            f"first): no heartbeat for {row['oldest_age']:.0f} s; that worker is {whose}"
        )
    fix = (
        "start a worker: the maintenance of any worker returns these jobs to pending once "
        "their lease is older than its visibility_timeout"
    )
    if alive:
        fix = (
            "a worker that is alive does not extend its leases: read its log for heartbeat errors; "
            + fix
        )
    fix += f" (workers whose visibility_timeout exceeds {threshold:g} s: raise --lease-threshold)"
    total = sum(row["jobs"] for row in rows)
    summary = f"{_count(total, 'running job')} without heartbeat for more than {threshold:g} s"
    return Check("leases", title, "fail", summary, details, fix, [dict(r) for r in rows])


async def notify_queue(conn: Connection, threshold: float) -> Check:
    """How full PostgreSQL's NOTIFY queue is (8 GB; full, every NOTIFY fails)."""
    usage = float(await conn.fetchval("SELECT pg_notification_queue_usage()"))
    title = "NOTIFY queue"
    summary = f"{usage:.4%} of the NOTIFY queue in use"
    if usage <= threshold:
        return Check("notify", title, "ok", summary, facts=[{"usage": usage}])
    fix = (
        "find the session that LISTENs and stays in a transaction (see long transactions): "
        "notifications are kept until every listener has read them; end it. When the queue "
        "is full, every NOTIFY, and so every enqueue that wakes workers, fails"
    )
    return Check("notify", title, "warn", summary, fix=fix, facts=[{"usage": usage}])
