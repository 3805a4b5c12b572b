"""One module per workload; each exposes `async def run(bench) -> Results`."""
