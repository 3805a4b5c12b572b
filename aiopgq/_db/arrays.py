"""Arrays sent to PostgreSQL as one text, on the hot path only (the claim with riding
completions, the batched done): ints as array literals ('{1,2,3}', cast in SQL with
`$n::text::bigint[]`), results as one JSON object by job id (results_object).

asyncpg has no built-in codec for int4[] and int8[]: the first statement that sends one
on a connection introspects the types (three more statements, before a young worker's
first completion). And asyncpg tests each element of any array it encodes against
collections.abc (Python calls per job and array). A join costs a fraction of that.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def int_array(values: Iterable[int]) -> str:
    """The PostgreSQL array literal of these ints (ids, attempts: never NULL)."""
    return "{" + ",".join(map(str, values)) + "}"


def results_object(results: Sequence[tuple[int, str]]) -> str:
    """The results of a batch of done jobs as one JSON object, job id -> result, of the
    jobs that returned something (most return None: then '{}', and the statement does
    nothing per job for results)."""
    return "{" + ",".join([f'"{job_id}":{text}' for job_id, text in results]) + "}"


def aligned_results(ids: Sequence[int], results: Sequence[tuple[int, str]]) -> list[str | None]:
    """The same results as a list aligned with `ids` (None for no result): the limited
    claim's function takes them so."""
    if not results:
        return [None] * len(ids)
    by_id = dict(results)
    return [by_id.get(job_id) for job_id in ids]
