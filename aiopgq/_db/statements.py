"""Every SQL statement, loaded from the `sql/` folder with the schema name bound in."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from .._errors import ConfigurationError, shown
from .._identifiers import is_identifier


def _sql_dir() -> Path:
    # Installed wheel: aiopgq/sql (force-included). Source checkout: sql/ beside aiopgq/.
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "sql", package.parent / "sql"):
        if (candidate / "migrations").is_dir():
            return candidate
    raise FileNotFoundError(f"aiopgq SQL files not found next to {package}; reinstall aiopgq")


SQL_DIR = _sql_dir()


def validate_identifier(name: str, what: str = "schema") -> str:
    """Return `name` if it is a safe lower-case SQL identifier, else raise."""
    if not is_identifier(name):
        raise ConfigurationError(
            f"invalid {what} name {shown(name)}: use 1-63 characters of a-z, 0-9 and _, "
            "starting with a letter or _"
        )
    return name


def quote_identifier(name: str) -> str:
    return '"' + validate_identifier(name) + '"'


@functools.cache
def _read(relative: str) -> str:
    return (SQL_DIR / relative).read_text(encoding="utf-8")


def done_channel(schema: str) -> str:
    """The channel on which finished jobs that someone awaits are announced (payload: the
    job id); a channel name has at most 63 bytes, like a schema name."""
    return f"{validate_identifier(schema)[:58]}:done"


def render(relative: str, schema: str) -> str:
    """The statement in `sql/<relative>` with the (validated) schema name bound in."""
    # {{schema_name}}: the bare name, for format('%I', ...) inside PL/pgSQL.
    text = _read(relative).replace("{{schema_name}}", validate_identifier(schema))
    text = text.replace("{{done_channel}}", f"'{done_channel(schema)}'")
    return text.replace("{{schema}}", quote_identifier(schema))


_PLACEHOLDER = re.compile(r"\$(\d+)")


def for_psycopg(statement: str) -> str:
    """A rendered statement for psycopg (SyncQueue): `$n` becomes the named placeholder
    `%(pn)s` (a value used twice is passed once), `%` is doubled, comment lines go."""
    lines = [line for line in statement.splitlines() if not line.lstrip().startswith("--")]
    return _PLACEHOLDER.sub(r"%(p\1)s", "\n".join(lines).replace("%", "%%"))


class Statements:
    """Every runtime statement, rendered once for one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = validate_identifier(schema)
        # The insert trigger notifies on a channel named after the schema (see
        # sql/migrations/0001_init.sql): every listener and pg_notify call uses this.
        self.channel = self.schema
        self.done_channel = done_channel(schema)
        for name in (
            "dequeue",
            "dequeue_queues",
            "dequeue_completing",
            "dequeue_limited",
            "dequeue_limited_traced",
            "limited_queues",
            "configure_queue",
            "queue_settings",
            "key_index",
            "key_index_state",
            "drop_key_index",
            "complete_done",
            "complete_error",
            "release",
            "release_orphans",
            "heartbeat",
            "rescue",
            "prune",
            "statistics_outgrown",
            "analyze_jobs",
            "insert_job",
            "insert_jobs",
            "insert_job_keyed",
            "insert_jobs_keyed",
            "set_concurrency_key",
            "get_job",
            "enqueue_unique",
            "cancel",
            "cancelled_jobs",
            "set_queue_notify",
            "locks",
            "wait_for_skippers",
            "hold_awake",
            "notify_queues",
            "release_awake",
            "set_queue_paused",
            "paused_queues",
            "retry_jobs",
            "failed_jobs_page",
            "list_jobs",
            "queue_stats",
            "latest_failures",
            "register_tasks",
            "registered_tasks",
            "insert_job_traced",
            "insert_jobs_traced",
            "worker_register",
            "worker_deregister",
            "expire_workers",
            "schedule_register",
            "schedule_state",
            "take_ticks",
            "schedule_status",
            "complete_special",
            "heartbeat_progress",
            "commit_done",
            "watch_jobs",
            "finished_jobs",
            "archive_state",
            "archive_extend",
            "archive_move",
            "archive_drop",
            "archive_restore",
            "archive_partitions",
            "set_archive_layout",
        ):
            setattr(self, name, render(f"{name}.sql", schema))

    dequeue: str
    dequeue_queues: str
    dequeue_completing: str
    dequeue_limited: str
    dequeue_limited_traced: str
    limited_queues: str
    configure_queue: str
    queue_settings: str
    key_index: str
    key_index_state: str
    drop_key_index: str
    complete_done: str

    def claim(
        self,
        *,
        several_queues: bool,
        completing: bool,
        traced: bool = False,
        checkpoint: bool = False,
    ) -> str:
        """The dequeue for one queue ($1 text) or several ($1 text[]); `completing`
        prepends the CTE that marks done the jobs riding along ($4-$6); `traced` returns
        each job's trace_context (JSON text) as a tenth column (aiopgq.tracing);
        `checkpoint` each job's saved state (JSON text) as the last column (workers whose
        handlers take a JobContext or have middleware)."""
        statement = self.dequeue_queues if several_queues else self.dequeue
        tail = "date_part('epoch', j.created_at);"
        assert statement.rstrip().endswith(tail)  # both dequeue files end this way
        if traced:
            statement = statement.rstrip()[:-1] + ", j.trace_context::text;\n"
        if checkpoint:
            statement = statement.rstrip()[:-1] + ", (j.metadata->'checkpoint')::text;\n"
        if not completing:
            return statement
        head = "WITH next AS ("
        assert head in statement  # both dequeue files start their CTEs this way
        return statement.replace(head, f"WITH {self.dequeue_completing.strip()},\nnext AS (", 1)

    def limited_claim(self, *, traced: bool, checkpoint: bool) -> str:
        """The claim of limited queues (sql/dequeue_limited.sql), with the trace context
        (`traced`) and each job's saved state (`checkpoint`) as claim() adds them."""
        statement = self.dequeue_limited_traced if traced else self.dequeue_limited
        if not checkpoint:
            return statement
        head, sep, tail = statement.partition("\nFROM ")
        assert sep and head.endswith("c.created_at" + (", c.trace_context" if traced else ""))
        return f"{head}, c.checkpoint{sep}{tail}"

    complete_error: str
    release: str
    release_orphans: str
    heartbeat: str
    rescue: str
    prune: str
    statistics_outgrown: str
    analyze_jobs: str
    insert_job: str
    insert_jobs: str
    insert_job_keyed: str
    insert_jobs_keyed: str
    set_concurrency_key: str
    get_job: str
    enqueue_unique: str
    cancel: str
    cancelled_jobs: str
    set_queue_notify: str
    locks: str
    wait_for_skippers: str
    hold_awake: str
    notify_queues: str
    release_awake: str
    set_queue_paused: str
    paused_queues: str
    retry_jobs: str
    failed_jobs_page: str
    list_jobs: str
    queue_stats: str
    latest_failures: str
    register_tasks: str
    registered_tasks: str
    insert_job_traced: str
    insert_jobs_traced: str
    worker_register: str
    worker_deregister: str
    expire_workers: str
    schedule_register: str
    schedule_state: str
    take_ticks: str
    schedule_status: str
    complete_special: str
    heartbeat_progress: str
    commit_done: str
    watch_jobs: str
    finished_jobs: str
    archive_state: str
    archive_extend: str
    archive_move: str
    archive_drop: str
    archive_restore: str
    archive_partitions: str
    set_archive_layout: str
