"""Dependencies: the parents of jobs an enqueue inserts (depends_on=), given in the
insert's transaction (sql/functions/dependencies.sql decides and releases them)."""

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


@contextlib.contextmanager
def unknown_parent_as_error() -> Iterator[None]:
    """A parent that is not a job (add_dependencies() refuses it, naming it) as
    JobNotFound."""
    try:
        yield
    except asyncpg.ForeignKeyViolationError as exc:
        raise JobNotFound(str(exc)) from None


def refuse_without_ids(opts: Options, call: str) -> None:
    """copy_many returns no ids, so it cannot give its jobs parents."""
    if opts.parents:
        raise TypeError(
            f"{call}() takes no depends_on (COPY returns no job ids): use enqueue_many() "
            "for jobs with parents"
        )
