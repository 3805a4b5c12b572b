"""Dependencies: the parents of jobs an enqueue inserts (depends_on=) and the sequence
they join (sequence_key=), given in the insert's transaction
(sql/functions/dependencies.sql and sequences.sql decide and release them)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import asyncpg

from .._db.connection import Connection
from .._db.statements import Statements
from .._enqueue_options import Options
from .._errors import JobNotFound
from .._models import JobStatus


async def add_parents(
    conn: Connection, sql: Statements, ids: Sequence[int], opts: Options
) -> JobStatus:
    """Give the new jobs `ids` their parents; the status they all have now (waiting,
    pending when every parent is done already, cancelled when one failed)."""
    with unknown_parent_as_error():
        rows = await conn.fetch(
            sql.add_dependencies, list(ids), list(opts.parents), opts.on_parent_failure
        )
    return JobStatus(rows[0]["status"])


async def link_jobs(
    conn: Connection, sql: Statements, ids: Sequence[int], opts: Options
) -> list[JobStatus]:
    """Give the new jobs `ids` their parents, then put them in their sequence (in order);
    each one's status now (waiting, pending, or cancelled by a failed parent)."""
    statuses = [JobStatus.PENDING] * len(ids)
    if opts.parents:
        statuses = [await add_parents(conn, sql, ids, opts)] * len(ids)
    if opts.sequence_key is not None:
        rows = await conn.fetch(sql.add_to_sequence, list(ids), opts.sequence_key)
        statuses = [JobStatus(row["status"]) for row in rows]
    return statuses


@contextlib.contextmanager
def unknown_parent_as_error() -> Iterator[None]:
    """A parent that is not a job (add_dependencies() refuses it, naming it) as
    JobNotFound."""
    try:
        yield
    except asyncpg.ForeignKeyViolationError as exc:
        raise JobNotFound(str(exc)) from None


def refuse_without_ids(opts: Options, call: str) -> None:
    """copy_many returns no ids, so it cannot give its jobs parents or a sequence."""
    if opts.sequence_key is not None:
        raise TypeError(
            f"{call}() takes no sequence_key (COPY returns no job ids): use enqueue_many() "
            "for jobs of a sequence"
        )
    if opts.parents:
        raise TypeError(
            f"{call}() takes no depends_on (COPY returns no job ids): use enqueue_many() "
            "for jobs with parents"
        )
