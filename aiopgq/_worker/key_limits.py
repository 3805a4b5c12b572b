"""Key limits a worker's tasks declare (`@queue.task(key_concurrency=K)`): which of its
queues they limit, and what those need in the database before the first claim.

A declared limit is the queue's key limit for this worker's claims when the queue has
none of its own (a limit set with `Queue.configure` wins): such a queue is claimed
through the limited claim (claims.py passes the limits to sql/claim/dequeue_limited.sql).
That claim needs what `configure` makes when it sets a first key limit, as the owner
of the tables: the index of pending jobs by key (without it each claim walks the
queue's whole backlog) and the queue's row, which keeps the key cursor (without it the
keys do not take turns across claims). A worker makes both if its role may, else
warns once with the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import asyncpg

from .._db.key_index import ensure_key_index
from .._db.statements import Statements
from .contracts import TaskSpec

logger = logging.getLogger("aiopgq.worker")


def declared_key_limits(tasks: Iterable[TaskSpec], queues: Sequence[str]) -> dict[str, int]:
    """{queue: the smallest key limit the tasks of that queue declare}, for `queues`."""
    limits: dict[str, int] = {}
    for task in tasks:
        limit, queue = task.key_concurrency, task.queue_name
        if limit is not None and queue in queues:
            limits[queue] = min(limit, limits.get(queue, limit))
    return dict(sorted(limits.items()))


async def prepare_key_limits(
    pool: asyncpg.Pool, sql: Statements, limits: Mapping[str, int], worker_id: str
) -> None:
    """Make the key index and the declared queues' rows unless they exist; a role that
    may not make them logs one warning naming the fix."""
    if not limits:
        return
    lacking = []
    async with pool.acquire() as conn:
        try:
            await ensure_key_index(conn, sql)
        except asyncpg.InsufficientPrivilegeError:
            lacking.append(f"the index {sql.schema}.jobs_pending_key_idx")
        missing = await conn.fetchval(sql.missing_queue_rows, list(limits))
        if missing:
            try:
                await conn.execute(sql.add_queue_rows, missing)
            except asyncpg.InsufficientPrivilegeError:
                lacking.append(f"rows in {sql.schema}.queues for {', '.join(missing)}")
    if lacking:
        first, limit = next(iter(limits.items()))
        logger.warning(
            "worker %s: its tasks declare key limits (%s) but its role cannot create %s, "
            "which only the owner of the tables can: the limits hold, but claims are slow "
            "without the index and keys do not take turns across claims without the rows. "
            "Run `aiopgq queue %s --key-concurrency %d` (or Queue.configure(%r, "
            "key_concurrency=%d)) once for each queue as the role that ran `aiopgq migrate`",
            worker_id,
            ", ".join(f"{queue}={n}" for queue, n in limits.items()),
            " and ".join(lacking),
            first,
            limit,
            first,
            limit,
            extra={"worker": worker_id, "queues": list(limits)},
        )
