"""`aiopgq worker`: run the worker of a user's Queue until a signal stops it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from .common import AddCommand, dsn_of, load_queue

logger = logging.getLogger("aiopgq.cli")


def register(add: AddCommand) -> None:
    worker = add("worker", "run a worker")
    worker.add_argument("target", help="MODULE:QUEUE, the module-level aiopgq.Queue with the tasks")
    worker.add_argument("--queues", help="comma-separated queues (default: all of the tasks')")
    worker.add_argument("--concurrency", type=int, default=10)
    worker.add_argument("--poll-interval", type=float, default=2.0)
    worker.add_argument("--grace-period", type=float, default=30.0)
    worker.add_argument("--heartbeat-interval", type=float, default=5.0)
    worker.add_argument("--visibility-timeout", type=float, default=30.0)
    worker.add_argument("--maintenance-interval", type=float, default=5.0)
    worker.add_argument("--hold-transaction", action="store_true")
    worker.add_argument("--burst", action="store_true", help="exit when no runnable job is left")
    worker.add_argument(
        "--no-periodic", action="store_true", help="do not enqueue the ticks of periodic tasks"
    )
    worker.add_argument("--no-uvloop", action="store_true")
    worker.set_defaults(run=run_worker, uvloop=True)


async def run_worker(args: argparse.Namespace) -> int:
    queue = load_queue(args.target)
    if args.dsn or args.schema:
        queue.reconfigure(dsn=dsn_of(args) if args.dsn else None, schema=args.schema)
    queues = [q for q in (args.queues or "").split(",") if q] or None
    worker = queue.worker(
        queues=queues,
        concurrency=args.concurrency,
        poll_interval=args.poll_interval,
        grace_period=args.grace_period,
        heartbeat_interval=args.heartbeat_interval,
        visibility_timeout=args.visibility_timeout,
        maintenance_interval=args.maintenance_interval,
        hold_transaction=args.hold_transaction,
        periodic=not args.no_periodic,
    )
    loop = asyncio.get_running_loop()
    run = asyncio.ensure_future(worker.run(burst=args.burst))
    stops = 0

    def on_signal(signum: int) -> None:
        nonlocal stops
        stops += 1
        if stops == 1:
            logger.warning("%s: stopping (again to abort)", signal.Signals(signum).name)
            worker.stop()
        else:
            run.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await run
    except asyncio.CancelledError:
        return 130
    return 0
