"""bloat: drain throughput with retained history and future-dated jobs vs a clean table.

Per round and system: drain N jobs from an empty table, and N jobs from a table loaded
with `--bloat-done-rows` finished rows and `--bloat-future-rows` pending rows due in 30
days (then VACUUM ANALYZE, as autovacuum would have by then); the order alternates by
round. Cost = 1 - bloated / clean.
Finished rows live where each system keeps them: bare/aiopgq/Procrastinate in the jobs
table, PGQueuer in `pgqueuer_log` (it deletes finished jobs from its queue table).
Procrastinate is left out unless it is the only system asked for (it is ~100x slower).
"""

from __future__ import annotations

from benchmarks.bench import Bench
from benchmarks.report import Results

CLEAN = "clean drain"
BLOATED = "bloated drain"
COST = "bloat cost"


def systems_for(bench: Bench) -> list[str]:
    names = [n for n in bench.systems if n != "procrastinate"]
    return names or list(bench.systems)


async def drain_once(bench: Bench, res: Results, name: str, round_no: int, bloated: bool) -> float:
    opts = bench.opts
    system = await bench.fresh(name)
    if bloated:
        await system.load_bloat(opts.bloat_done_rows, opts.bloat_future_rows)
    out = await bench.drain(name, opts.jobs_for(name), opts.workers, bench.drain_config(name))
    bench.note_inexact(res, name, round_no, out)
    return out.rate


async def run(bench: Bench) -> Results:
    opts = bench.opts
    names = systems_for(bench)
    res = Results("bloat", names)
    res.metric(CLEAN, "jobs/s")
    res.metric(BLOATED, "jobs/s")
    res.metric(COST, "%", higher_is_better=False)
    for name in names:
        desc = bench.systems[name].describe(bench.drain_config(name))
        res.configs[name] = f"{opts.workers} processes x {desc}, {opts.jobs_for(name)} jobs"
    res.configs["fixture"] = (
        f"{opts.bloat_done_rows:,} finished rows + {opts.bloat_future_rows:,} future-dated jobs"
    )
    if "procrastinate" in bench.systems and "procrastinate" not in names:
        res.notes.append("procrastinate left out (slow); run --only bloat --systems procrastinate")
    for round_no in range(opts.rounds):
        for name in bench.order(round_no):
            if name not in names:
                continue
            # Alternate which table state goes first, so warm-up favours neither.
            states = (False, True) if round_no % 2 == 0 else (True, False)
            rates = {}
            for bloated in states:
                rates[bloated] = await drain_once(bench, res, name, round_no, bloated)
            res.add(name, CLEAN, round_no, rates[False])
            res.add(name, BLOATED, round_no, rates[True])
            res.add(name, COST, round_no, (1 - rates[True] / rates[False]) * 100)
            print(
                f"  bloat r{round_no} {name}: clean {rates[False]:,.0f}/s, "
                f"bloated {rates[True]:,.0f}/s",
                flush=True,
            )
    res.check("aiopgq bloat cost %", res.median("aiopgq", COST), "<=", 10)
    return res
