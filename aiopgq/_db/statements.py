"""Every SQL statement, loaded from the `sql/` folder with the schema name bound in."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
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

# Folders of sql/ that hold the schema itself, applied by migrate(), not statements.
SCHEMA_FOLDERS = frozenset({"migrations", "functions"})


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


@functools.cache
def statement_files() -> dict[str, str]:
    """Statement name -> its file, relative to sql/: every `sql/<role>/<name>.sql` outside
    the schema folders. A name is the file's stem, so it must be unique across roles."""
    found: dict[str, str] = {}
    for path in sorted(SQL_DIR.glob("*/*.sql")):
        role = path.parent.name
        if role in SCHEMA_FOLDERS:
            continue
        if path.stem in found:
            raise RuntimeError(f"two statements named {path.stem}: {found[path.stem]}, {role}")
        found[path.stem] = f"{role}/{path.name}"
    return found


def done_channel(schema: str) -> str:
    """The channel on which finished jobs that someone awaits are announced (payload: the
    job id); a channel name has at most 63 bytes, like a schema name."""
    return f"{validate_identifier(schema)[:58]}:done"


# {{#flag}}...{{/flag}}: text kept only in the variants that set the flag.
_SECTION = re.compile(r"\{\{#([a-z_]+)\}\}(.*?)\{\{/\1\}\}", re.DOTALL)
# {{> role/name.sql}}: another file's text (stripped) in its place.
_INCLUDE = re.compile(r"\{\{> ([a-z_/]+\.sql)\}\}")


def render(relative: str, schema: str, flags: Mapping[str, bool] | None = None) -> str:
    """The statement in `sql/<relative>` with the (validated) schema name bound in, and
    its optional sections kept where `flags` sets them."""
    chosen = flags or {}
    text = _SECTION.sub(lambda m: m.group(2) if chosen.get(m.group(1)) else "", _read(relative))
    text = _INCLUDE.sub(lambda m: _read(m.group(1)).strip(), text)
    # {{schema_name}}: the bare name, for format('%I', ...) inside PL/pgSQL.
    text = text.replace("{{schema_name}}", validate_identifier(schema))
    text = text.replace("{{done_channel}}", f"'{done_channel(schema)}'")
    return text.replace("{{schema}}", quote_identifier(schema))


_PLACEHOLDER = re.compile(r"\$(\d+)")


def for_psycopg(statement: str) -> str:
    """A rendered statement for psycopg (SyncQueue): `$n` becomes the named placeholder
    `%(pn)s` (a value used twice is passed once), `%` is doubled, comment lines go."""
    lines = [line for line in statement.splitlines() if not line.lstrip().startswith("--")]
    return _PLACEHOLDER.sub(r"%(p\1)s", "\n".join(lines).replace("%", "%%"))


class Statements:
    """Every runtime statement, rendered once for one schema: `sql.<name>` is the file
    `sql/<role>/<name>.sql` (sql/README.md lists the roles)."""

    def __init__(self, schema: str, roles: frozenset[str] | None = None) -> None:
        self.schema = validate_identifier(schema)
        # The insert trigger notifies on a channel named after the schema (see
        # sql/functions/wake_on_insert.sql): every listener and pg_notify call uses this.
        self.channel = self.schema
        self.done_channel = done_channel(schema)
        self._rendered = {
            name: render(relative, schema)
            for name, relative in statement_files().items()
            if roles is None or relative.split("/", 1)[0] in roles
        }

    def __getattr__(self, name: str) -> str:
        # Only reached for names that are not attributes: the statements.
        try:
            return self.__dict__["_rendered"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(f"no statement sql/*/{name}.sql") from None

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
        name = "dequeue_queues" if several_queues else "dequeue"
        flags = {"completing": completing, "traced": traced, "checkpoint": checkpoint}
        return render(statement_files()[name], self.schema, flags)

    def limited_claim(self, *, traced: bool, checkpoint: bool) -> str:
        """The claim of limited queues (sql/claim/dequeue_limited.sql), with the trace
        context (`traced`) and each job's saved state (`checkpoint`) as claim() adds them."""
        flags = {"traced": traced, "checkpoint": checkpoint}
        return render(statement_files()["dequeue_limited"], self.schema, flags)
