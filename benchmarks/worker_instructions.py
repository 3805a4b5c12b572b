"""The worker's own CPU per drained job as callgrind counts it: instructions, not seconds.

    python -m benchmarks.worker_instructions                     # this tree
    python -m benchmarks.worker_instructions --tree ../old-checkout --dsn DSN

Timed CPU per job moves by 20-30 % from run to run on a shared 2-core machine; the
instructions a Python process executes for the same drain do not (valgrind counts them
whatever else runs). Each figure comes from four runs of a child process under
`valgrind --tool=callgrind`, one in-process worker (`run(burst=True)`, concurrency 100)
draining no-op jobs enqueued with COPY: N and 4N jobs drained, and N and 4N jobs only
enqueued. (drained 4N - drained N) - (enqueued 4N - enqueued N), over 3N jobs, leaves
out the interpreter's start, the imports, the schema and the enqueue: what is left is
the worker's work per job (its asyncpg decoding and the event loop included, the
server's excluded: benchmarks.instructions counts that). `--tree` measures another
checkout with this interpreter (its aiopgq imported first), to compare before and
after. Needs valgrind (apt install valgrind); about two minutes at the default N.

Without --dsn it uses AIOPGQ_DSN, else DATABASE_URL, else an embedded server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg

from aiopgq import Queue

HERE = Path(__file__).resolve()


async def child(dsn: str, jobs: int, drain: bool) -> None:
    """Enqueue `jobs` no-op jobs in a fresh schema and, with `drain`, drain them.

    The set-up of benchmarks/calls.py, written out: the child runs by path against
    another tree's aiopgq, and imports nothing from this benchmarks package (an older
    tree's would shadow it)."""
    schema = f"wi_{uuid.uuid4().hex[:10]}"
    queue = Queue(dsn, schema=schema)
    await queue.migrate()

    @queue.task(name="wi.noop")
    async def noop(n: int) -> None:
        return None

    try:
        async with queue:
            await noop.copy_many({"n": i} for i in range(jobs))
            await queue.pool.execute(f'ANALYZE "{schema}".jobs')
            if drain:
                await queue.worker(concurrency=100).run(burst=True)
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


def instructions(tree: Path, dsn: str, jobs: int, drain: bool) -> int:
    """Instructions of one child process under callgrind, importing `tree`'s aiopgq."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(HERE),  # by path: the tree's aiopgq comes first, not this checkout's
        "--child",
        "drain" if drain else "enqueue",
        "--jobs",
        str(jobs),
        "--dsn",
        dsn,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the callgrind child failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_job(tree: Path, dsn: str, jobs: int) -> float:
    small, large = jobs, 4 * jobs
    drained = instructions(tree, dsn, large, True) - instructions(tree, dsn, small, True)
    enqueued = instructions(tree, dsn, large, False) - instructions(tree, dsn, small, False)
    return (drained - enqueued) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_instructions")
    parser.add_argument("--jobs", type=int, default=1000, help="N (the runs drain N and 4N)")
    parser.add_argument("--dsn")
    parser.add_argument("--tree", type=Path, help="another checkout to measure")
    parser.add_argument("--results-dir", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--child", choices=("drain", "enqueue"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child is not None:
        asyncio.run(child(opts.dsn, opts.jobs, opts.child == "drain"))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt install valgrind")
    from benchmarks.calls import database  # not in the child: it runs by path

    tree = opts.tree.resolve() if opts.tree is not None else HERE.parent.parent
    with database(opts.dsn) as dsn:
        figure = per_job(tree, dsn, opts.jobs)
    where = str(tree)
    python = ".".join(map(str, sys.version_info[:3]))
    print(f"{where}, Python {python}: {figure:,.0f} worker instructions per drained job")
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    result = {"tree": where, "python": python, "per_job": round(figure), "jobs": opts.jobs}
    (opts.results_dir / "worker_instructions.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
