"""Side-by-side benchmarks of aiopgq, a bare asyncpg loop, PGQueuer and Procrastinate.

Run `python -m benchmarks --help`. Each workload prints a table (medians of interleaved
rounds, ratios to the bare loop, pass/fail against the project's targets) and writes
`benchmarks/results/<workload>.json` and `.png`.
"""
