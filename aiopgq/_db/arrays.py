"""Integer arrays sent to PostgreSQL as text literals ('{1,2,3}', cast in SQL with
`$n::text::bigint[]`), on the hot path only (the claim with riding completions, the
batched done).

asyncpg has no built-in codec for int4[] and int8[]: the first statement that sends one
on a connection introspects the types (three more statements, before a young worker's
first completion), and each element is tested against collections.abc as it is encoded
(a Python call per job and array). A join of the ints costs a fraction of that.
"""

from __future__ import annotations

from collections.abc import Iterable


def int_array(values: Iterable[int]) -> str:
    """The PostgreSQL array literal of these ints (ids, attempts: never NULL)."""
    return "{" + ",".join(map(str, values)) + "}"
