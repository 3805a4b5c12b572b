"""The statements of the operations tools (sql/ops/*.sql), rendered for one schema."""

from __future__ import annotations

from .._db.statements import Statements


class OpsStatements(Statements):
    """The read-only statements doctor, top and workers run (not the worker runtime's):
    `ops.<name>` is sql/ops/<name>.sql, or a read of sql/read/ (the queues' summary)."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema, roles=frozenset({"ops", "read"}))
