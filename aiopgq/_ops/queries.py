"""The statements of the operations tools (sql/ops/*.sql), rendered for one schema."""

from __future__ import annotations

from .._db.statements import render, validate_identifier


class OpsStatements:
    """The read-only statements doctor, top and workers run (not the worker runtime's)."""

    def __init__(self, schema: str) -> None:
        self.schema = validate_identifier(schema)
        for name in (
            "workers",
            "doctor_sessions",
            "doctor_blocked",
            "doctor_table",
            "doctor_stale_leases",
            "doctor_pending_index",
        ):
            setattr(self, name, render(f"ops/{name}.sql", schema))
        # The queues' one summary, as every other view reads it.
        self.queue_stats = render("queue_stats.sql", schema)

    workers: str
    queue_stats: str
    doctor_sessions: str
    doctor_blocked: str
    doctor_table: str
    doctor_stale_leases: str
    doctor_pending_index: str
