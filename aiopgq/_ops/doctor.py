"""Doctor: checks a queue's database and says, for each check, a verdict and the fix.

Checks: the schema version against the code's; the real claim statement's plans;
sessions blocked on locks and who blocks them; transactions open past a threshold
(and the xmin they hold back); the jobs table's dead rows, vacuum and settings;
running jobs with stale leases; the NOTIFY queue's usage. A report needs action when
a check says "warn" or "fail".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from .._db.connection import Connection
from .._db.migrations import code_version, database_version
from .._db.statements import Statements
from . import checks
from .checks import Check, Settings
from .queries import OpsStatements


@dataclass
class Report:
    schema: str
    server_version: str
    checks: list[Check] = field(default_factory=list)

    @property
    def needs_action(self) -> bool:
        return any(check.verdict in ("warn", "fail") for check in self.checks)

    def as_json(self) -> str:
        return json.dumps(
            {
                "schema": self.schema,
                "server_version": self.server_version,
                "needs_action": self.needs_action,
                "checks": [asdict(check) for check in self.checks],
            },
            indent=2,
            default=str,
        )


async def examine(conn: Connection, schema: str, settings: Settings | None = None) -> Report:
    """Run every check on `conn` (a connection of its own: the plan check prepares a
    statement on it) and return the report."""
    settings = settings or Settings()
    sql, ops = Statements(schema), OpsStatements(schema)
    report = Report(schema, str(await conn.fetchval("SHOW server_version")))
    version = await database_version(conn, schema)
    report.checks.append(_schema_check(schema, version))
    current = version == code_version()
    if current:
        report.checks.append(await check_claim_plan(conn, sql, ops))
    else:
        report.checks.append(_skipped("claim_plan", "claim plan"))
    report.checks.append(await checks.blocked_sessions(conn, ops, settings.lock_threshold))
    report.checks.append(await checks.long_transactions(conn, ops, settings.idle_threshold))
    if current:
        report.checks.append(await checks.table_health(conn, ops, settings))
        report.checks.append(await checks.stale_leases(conn, ops, settings.lease_threshold))
    else:
        report.checks.append(_skipped("table", "jobs table"))
        report.checks.append(_skipped("leases", "stale leases"))
    report.checks.append(await checks.notify_queue(conn, settings.notify_threshold))
    return report


def _skipped(name: str, title: str) -> Check:
    return Check(name, title, "skip", "not checked: the schema is not at this aiopgq's version")


def _schema_check(schema: str, version: int | None) -> Check:
    needed = code_version()
    title = "schema version"
    if version is None:
        return Check(
            "schema", title, "fail", f"schema {schema} has no aiopgq tables", fix="aiopgq migrate"
        )
    if version < needed:
        summary = f"schema {schema} is at version {version}, this aiopgq needs {needed}"
        return Check("schema", title, "fail", summary, fix="aiopgq migrate")
    if version > needed:
        summary = f"schema {schema} is at version {version}, newer than this aiopgq ({needed})"
        return Check("schema", title, "fail", summary, fix="upgrade aiopgq where you run this")
    return Check("schema", title, "ok", f"version {version}, as this aiopgq needs")


# -- the claim's plan -----------------------------------------------------------------

_PREPARED = "aiopgq_doctor_claim"
# Below this many pages (1 MiB) a Seq Scan of jobs costs less than an index descent.
_SMALL_TABLE_PAGES = 128


async def check_claim_plan(conn: Connection, sql: Statements, ops: OpsStatements) -> Check:
    """EXPLAIN every form of the claim, with a custom plan (a real queue name) and the
    generic plan workers use after a few runs: each must read jobs_pending_idx under
    LockRows, and nothing may read jobs with a Seq Scan."""
    title = "claim plan"
    index = await conn.fetchrow(ops.doctor_pending_index)
    assert index is not None  # one row, from the LEFT JOIN
    quoted = f'"{sql.schema}"'
    if index["valid"] is None:
        fix = (
            f"CREATE INDEX CONCURRENTLY jobs_pending_idx ON {quoted}.jobs "
            "(hashtext(queue), priority DESC, run_at, id) WHERE status = 'pending'"
        )
        broken = f"the index jobs_pending_idx of {quoted}.jobs is missing"
    elif not (index["valid"] and index["ready"]):
        fix = f"REINDEX INDEX CONCURRENTLY {quoted}.jobs_pending_idx"
        broken = "the index jobs_pending_idx is invalid (a CREATE INDEX CONCURRENTLY that failed?)"
    else:
        fix = (
            f"ANALYZE {quoted}.jobs (stale statistics make the planner prefer a scan; a "
            "running worker's maintenance does it once the table outgrows them)"
        )
        broken = ""
    queue = index["some_queue"] or "default"
    small = index["pages"] < _SMALL_TABLE_PAGES
    details, bad, excused = [], 0, False
    for several in (False, True):
        for completing in (False, True):
            statement = sql.claim(several_queues=several, completing=completing)
            args: list[Any] = [[queue] if several else queue, 100, "aiopgq-doctor"]
            if completing:
                args += ["{}", "{}", "{}"]  # ids, attempts, results: as _db/arrays.py sends
            form = ("several queues" if several else "one queue") + (
                ", with completions" if completing else ""
            )
            for kind, plan in (
                ("custom", await _explain(conn, statement, args)),
                ("generic", await _explain_generic(conn, statement, len(args))),
            ):
                good, small_scan, shape = _judge(plan, small_table=small)
                bad += not good
                excused = excused or small_scan
                details.append(f"{form}, {kind} plan: {shape}" + ("" if good else "  <- wrong"))
    if excused:
        details.append(
            f"(jobs has {index['pages']} pages: below {_SMALL_TABLE_PAGES}, a Seq Scan is the "
            "planner's right choice and not counted)"
        )
    if bad or broken:
        summary = broken or f"{bad} of 8 plans of the claim do not read jobs_pending_idx"
        return Check("claim_plan", title, "fail", summary, details, fix)
    summary = "every form of the claim reads jobs_pending_idx under LockRows, " + (
        "no Seq Scan but of the small table" if excused else "no Seq Scan"
    )
    return Check("claim_plan", title, "ok", summary, details)


async def _explain(conn: Connection, statement: str, args: list[Any]) -> dict[str, Any]:
    text = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args)
    plan: dict[str, Any] = json.loads(text)[0]["Plan"]
    return plan


async def _explain_generic(conn: Connection, statement: str, params: int) -> dict[str, Any]:
    await conn.execute(f"PREPARE {_PREPARED} AS {statement}")
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            nulls = ", ".join(["NULL"] * params)
            text = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {_PREPARED}({nulls})")
    finally:
        await conn.execute(f"DEALLOCATE {_PREPARED}")
    plan: dict[str, Any] = json.loads(text)[0]["Plan"]
    return plan


def _judge(plan: dict[str, Any], *, small_table: bool) -> tuple[bool, bool, str]:
    """(good, excused, shape): good when jobs_pending_idx is read under LockRows and no
    node scans jobs sequentially; excused when the only fault is a Seq Scan of a small
    table. The shape is the path to the node that decided it: the claim's own read
    (under LockRows) first."""
    found = list(_paths(plan, []))
    locked = [p for p in found if any(n["Node Type"] == "LockRows" for n in p[:-1])]
    pending = [p for p in locked if p[-1].get("Index Name") == "jobs_pending_idx"]
    seq = [p for p in found if p[-1]["Node Type"] == "Seq Scan" and _on_jobs(p[-1])]
    seq.sort(key=lambda p: p not in locked)
    if seq and (not small_table or not pending):
        path = seq[0]
    else:
        path = pending[0] if pending else seq[0] if seq else [plan]
    shape = " > ".join(_describe(node) for node in path)
    if not pending:
        return False, False, shape
    if seq and not small_table:
        return False, False, shape
    return True, bool(seq), shape


def _paths(node: dict[str, Any], above: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    path = [*above, node]
    yield path
    for child in node.get("Plans", []):
        yield from _paths(child, path)


def _on_jobs(node: dict[str, Any]) -> bool:
    return bool(node.get("Relation Name") == "jobs")


def _describe(node: dict[str, Any]) -> str:
    kind = str(node["Node Type"])
    if "Index Name" in node:
        return f"{kind} using {node['Index Name']}"
    if "Relation Name" in node:
        return f"{kind} on {node['Relation Name']}"
    return kind
