"""The SQL contract itself: plans, locks, migrations."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from aiopgq import Queue, SchemaError
from aiopgq._db.migrations import baseline, code_version, migrations
from aiopgq._db.statements import SQL_DIR, Statements, statement_files

from ..support.legacy_schema import install_up_to


async def test_two_connections_dequeue_disjoint_batches(dsn: str, queue: Queue) -> None:
    await queue.enqueue_many("t", [{"i": i} for i in range(100)])
    a, b = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        ta, tb = a.transaction(), b.transaction()
        await ta.start()
        await tb.start()
        # Both transactions stay open: their row locks overlap in time.
        rows_a = await a.fetch(queue.sql.dequeue, "default", 60, "worker-a")
        rows_b = await b.fetch(queue.sql.dequeue, "default", 60, "worker-b")
        ids_a, ids_b = {r["id"] for r in rows_a}, {r["id"] for r in rows_b}
        assert len(ids_a) == 60 and len(ids_b) == 40
        assert ids_a.isdisjoint(ids_b)
        multi = await b.fetch(queue.sql.dequeue_queues, ["default", "other"], 10, "worker-b")
        assert multi == []  # everything is locked by a or already claimed by b
        await ta.commit()
        await tb.commit()
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("layout", ["plain", "partitioned"])
async def test_dequeue_uses_the_partial_index_with_many_done_rows(
    queue: Queue, conn: asyncpg.Connection, layout: str
) -> None:
    table = f'"{queue.schema}".jobs'
    await conn.execute(
        f"INSERT INTO {table} (task, status, finished_at) "
        "SELECT 't', 'done', now() FROM generate_series(1, 100000)"
    )
    if layout == "partitioned":
        # The claim reads jobs alone in both layouts: here most finished rows are in
        # the archive (moved as the maintenance leader moves them), some still in jobs.
        await queue.enable_partitioning(archive_after=60)
        await conn.execute(
            f"WITH moved AS (DELETE FROM {table} WHERE id % 10 <> 0 RETURNING *) "
            f'INSERT INTO "{queue.schema}".jobs_archive SELECT * FROM moved'
        )
    await conn.execute(f"INSERT INTO {table} (task) SELECT 't' FROM generate_series(1, 50)")
    await conn.execute(f"ANALYZE {table}")
    for several in (False, True):
        for completing in (False, True):
            statement = queue.sql.claim(several_queues=several, completing=completing)
            args = [["default", "other"] if several else "default", 100, "w"]
            if completing:
                args += ["{}", "{}", "{}"]  # ids, attempts, results: as _db/arrays.py
            plan = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args))
            nodes = list(_plan_nodes(plan[0]["Plan"]))
            kinds = {node["Node Type"] for node in nodes}
            assert "jobs_pending_idx" in {node.get("Index Name") for node in nodes}, nodes
            assert "Seq Scan" not in kinds, nodes
            assert "Tid Scan" in kinds, nodes  # the update finds the locked rows by ctid


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


async def test_completions_look_jobs_up_by_id_when_statistics_saw_none_running(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # Statistics taken while nothing ran (ANALYZE after a bulk load, before the
    # workers start) estimate one running row. A generic plan then scanned every
    # running job through jobs_running_idx once per completed job: quadratic in the
    # batch size, and a third slower drains with 4 workers x 100.
    table = f'"{queue.schema}".jobs'
    await conn.execute(f"INSERT INTO {table} (task) SELECT 't' FROM generate_series(1, 30000)")
    await conn.execute(f"ANALYZE {table}")
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    statements = {
        "claim": (queue.sql.claim(several_queues=False, completing=True), 6),
        "complete_done": (queue.sql.complete_done, 4),
        "complete_error": (queue.sql.complete_error, 6),
        "release": (queue.sql.release, 4),
    }
    for name, (statement, params) in statements.items():
        await conn.execute(f"PREPARE s AS {statement}")
        nulls = ", ".join(["NULL"] * params)
        plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE s({nulls})")
        await conn.execute("DEALLOCATE s")
        text = json.dumps(plan)
        assert "jobs_running_idx" not in text, (name, text)


async def test_heartbeat_skips_rows_whose_outcome_is_being_written(dsn: str, queue: Queue) -> None:
    # The completer locks the jobs it completes in completion order; the heartbeat
    # (over every job the worker holds, those being completed included) locked them in
    # id order and waited for the ones the completer held: a deadlock once the completer
    # reached a row the heartbeat held (seen in the chaos suite when connections were
    # killed). It skips a locked row now, so it never waits and no cycle can form.
    jobs = await queue.enqueue_many("t", [{"i": i} for i in range(2)])
    ids = [job.id for job in jobs]
    completer, heartbeat = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        claimed = await completer.fetch(queue.sql.dequeue, "default", 2, "w")
        assert sorted(r["id"] for r in claimed) == ids
        writing = completer.transaction()
        await writing.start()
        await completer.execute(queue.sql.complete_done, f"{{{ids[1]}}}", "{1}", "{}", "w")
        # ids[1] is locked by the completer's open write: the heartbeat must not wait.
        row = await heartbeat.fetchrow(queue.sql.heartbeat, ids, "w", timeout=5)
        # The locked row is skipped: neither renewed nor lost (its lease counts on).
        assert (row["renewed"], row["lost"], row["cancelled"]) == ([ids[0]], [], [])
        # The same with progress reported for both (heartbeat_progress.sql).
        row = await heartbeat.fetchrow(
            queue.sql.heartbeat_progress, ids, "w", ids, [1, 1], [0.5, 0.5], [None, None], timeout=5
        )
        assert (row["renewed"], row["lost"], row["cancelled"]) == ([ids[0]], [], [])
        await completer.execute(queue.sql.complete_done, f"{{{ids[0]}}}", "{1}", "{}", "w")
        await writing.commit()
        done = await heartbeat.fetchval(
            f"""SELECT count(*) FROM "{queue.schema}".jobs WHERE status = 'done'"""
        )
        assert done == 2
    finally:
        await completer.close()
        await heartbeat.close()


async def test_queues_whose_names_share_a_hash_keep_their_own_jobs(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # jobs_pending_idx is keyed by hashtext(queue): the claim's `queue = $1` must
    # keep out the jobs of another queue with the same 32-bit hash.
    first, second = await conn.fetchrow(
        "SELECT min(n), max(n) FROM (SELECT 'q' || g AS n FROM generate_series(1, 300000) g) s "
        "GROUP BY hashtext(n) HAVING count(*) = 2 LIMIT 1"
    )
    ran: list[str] = []

    @queue.task(name="where")
    async def where(name: str) -> None:
        ran.append(name)

    for name in (first, second, "other"):
        await queue.enqueue_many("where", [{"name": name}] * 3, queue=name)
    await queue.worker(queues=[second, "other"]).run(burst=True)  # the several-queues claim
    assert sorted(ran) == sorted([second] * 3 + ["other"] * 3)
    await queue.enqueue_many("where", [{"name": second}] * 3, queue=second)
    ran.clear()
    await queue.worker(queues=[first]).run(burst=True)  # the single-queue claim
    assert ran == [first] * 3
    status = {(row["queue"], row["status"]): row["jobs"] for row in await queue.status()}
    expected = {(first, "done"): 3, (second, "done"): 3, (second, "pending"): 3}
    assert status == {**expected, ("other", "done"): 3}


async def test_migrate_is_idempotent_and_safe_concurrently(dsn: str, schema: str) -> None:
    queues = [Queue(dsn, schema=schema) for _ in range(4)]
    applied = await asyncio.gather(*(q.migrate() for q in queues))
    # A fresh install is the baseline, the numbered migrations above it (none once the
    # baseline is folded to this aiopgq's version), and its functions.
    fresh = [baseline()[0], *(v for v, _ in migrations() if v > baseline()[0])]
    assert fresh[-1] == code_version()
    assert sorted(applied, key=len) == [[], [], [], fresh]
    assert await queues[0].migrate() == []


async def test_upgrading_a_version_4_schema_keeps_its_jobs_and_wake_ups(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    # The schema as aiopgq 4 left it (text-keyed pending index, AFTER trigger), with jobs.
    quoted = f'"{schema}"'
    await install_up_to(conn, schema, 4)
    await conn.execute(
        f"INSERT INTO {quoted}.jobs (task, queue, payload) "
        "SELECT 'up', q, jsonb_build_object('n', g) FROM generate_series(1, 10) g, "
        "unnest(ARRAY['default', 'other']) q"
    )
    queue = Queue(dsn, schema=schema)
    await install_up_to(conn, schema, 19, after=4)
    assert await queue.migrate() == [v for v, _ in migrations() if v >= 20]
    ran: list[int] = []

    @queue.task(name="up")
    async def up(n: int) -> None:
        ran.append(n)

    await queue.worker(queues=["default", "other"]).run(burst=True)
    assert sorted(ran) == sorted(list(range(1, 11)) * 2)
    woken: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(schema, lambda *args: woken.put_nowait(args[3]))
    async with queue:
        await up.enqueue(n=11)  # no worker is awake: the upgraded trigger notifies
        assert await asyncio.wait_for(woken.get(), 10) == "default"
        status = {(row["queue"], row["status"]): row["jobs"] for row in await queue.status()}
    assert status == {("default", "done"): 10, ("other", "done"): 10, ("default", "pending"): 1}


async def test_worker_refuses_a_missing_or_old_schema(dsn: str, schema: str) -> None:
    queue = Queue(dsn, schema=schema)

    @queue.task(name="x")
    async def x() -> None:
        pass

    with pytest.raises(SchemaError, match="run `aiopgq migrate`"):
        await queue.worker().run(burst=True)
    async with queue:
        with pytest.raises(SchemaError, match="aiopgq migrate"):
            await x.enqueue()
    await queue.migrate()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DELETE FROM "{schema}".schema_version')
        await conn.execute(f'INSERT INTO "{schema}".schema_version VALUES (0)')
        with pytest.raises(
            SchemaError, match=r"at version 0, this aiopgq needs \d+: run `aiopgq migrate`"
        ):
            await queue.worker().run(burst=True)
        await conn.execute(f'INSERT INTO "{schema}".schema_version VALUES (999)')
        with pytest.raises(SchemaError, match="upgrade aiopgq"):
            await queue.worker().run(burst=True)
    finally:
        await conn.close()


async def test_table_has_queue_friendly_storage_settings(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    options = await conn.fetchval(
        "SELECT reloptions FROM pg_class WHERE oid = $1::regclass", f'"{queue.schema}".jobs'
    )
    settings = dict(o.split("=") for o in options)
    assert int(settings["fillfactor"]) < 100
    assert float(settings["autovacuum_vacuum_scale_factor"]) <= 0.05


async def test_sql_enqueue_rejects_a_payload_that_is_not_an_object(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.fetchval(f"SELECT \"{queue.schema}\".enqueue('t', '[1, 2]'::jsonb)")


_PACKAGE = Path(__file__).resolve().parents[2] / "aiopgq"
# The names of objects that hold Statements (or OpsStatements) in the package's code.
_STATEMENT_HOLDERS = {"sql", "_sql", "ops"}


def _statement_names_in_code() -> tuple[set[str], set[str]]:
    """(names read as statements, every attribute name and string in aiopgq/): a
    statement is read as `<holder>.name`, `<holder>["name"]` or a "role/name.sql" path."""
    read: set[str] = set()
    mentioned: set[str] = set()
    for path in _PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            holder: ast.expr | None = None
            name = None
            if isinstance(node, ast.Attribute):
                mentioned.add(node.attr)
                holder, name = node.value, node.attr
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                holder, name = node.value, node.slice.value
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                mentioned.add(node.value)
                if node.value.endswith(".sql") and "/" in node.value and "*" not in node.value:
                    read.add(node.value.rsplit("/", 1)[1].removesuffix(".sql"))
            held = holder.attr if isinstance(holder, ast.Attribute) else getattr(holder, "id", "")
            if held in _STATEMENT_HOLDERS and isinstance(name, str):
                read.add(name)
    return read, mentioned | read


def test_every_statement_file_is_used_and_every_statement_read_has_a_file() -> None:
    files = statement_files()
    read, mentioned = _statement_names_in_code()
    own = {name for name in vars(Statements) if not name.startswith("_")}
    own |= {"schema", "channel", "done_channel"}
    assert sorted(read - own - files.keys()) == []  # read in code, no sql/<role>/<name>.sql
    included = {  # {{> role/name.sql}} in another statement
        name
        for name, relative in files.items()
        for other in files.values()
        if f"{{{{> {relative}}}}}" in _raw(other)
    }
    assert sorted(files.keys() - mentioned - included) == []  # a file no code names
    # Each file rendered with the schema bound in and no placeholder left.
    sql = Statements("some_schema")
    for name in files:
        assert "{{" not in getattr(sql, name), name
    with pytest.raises(AttributeError, match="no statement"):
        sql.no_such_statement  # noqa: B018


def _raw(relative: str) -> str:
    return (SQL_DIR / relative).read_text(encoding="utf-8")
