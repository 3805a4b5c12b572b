"""`aiopgq pause`, `resume`, `cancel` and `retry`: an operator's hands on queues and jobs."""

from __future__ import annotations

import argparse
import sys

from .. import Queue
from .._errors import JobNotFound
from .common import AddCommand, UsageError, queue_of


def register(add: AddCommand) -> None:
    pause = add("pause", "stop workers from claiming a queue's jobs (running jobs finish)")
    pause.add_argument("queues", nargs="+", metavar="QUEUE", help="the queues to pause")
    pause.set_defaults(run=pause_queues)

    resume = add("resume", "let workers claim a paused queue's jobs again (wakes them at once)")
    resume.add_argument("queues", nargs="+", metavar="QUEUE", help="the queues to resume")
    resume.set_defaults(run=resume_queues)

    cancel = add("cancel", "cancel pending, waiting or running jobs (a running handler is stopped)")
    cancel.add_argument("ids", nargs="+", type=int, metavar="ID", help="the jobs to cancel")
    cancel.set_defaults(run=cancel_jobs)

    retry = add("retry", "re-queue failed (or cancelled) jobs with their attempts reset")
    retry.add_argument("ids", nargs="*", type=int, metavar="ID", help="failed or cancelled jobs")
    retry.add_argument(
        "--queue", help="every failed job of this queue (default: of any queue; with --task: both)"
    )
    retry.add_argument("--task", help="every failed job of this task (default: of any task)")
    retry.add_argument("--all-failed", action="store_true", help="every failed job")
    retry.set_defaults(run=retry_jobs)


async def pause_queues(args: argparse.Namespace) -> int:
    async with queue_of(args) as queue:
        for name in args.queues:
            await queue.pause(name)
            print(f"paused queue {name}")
    return 0


async def resume_queues(args: argparse.Namespace) -> int:
    async with queue_of(args) as queue:
        for name in args.queues:
            await queue.resume(name)
            print(f"resumed queue {name}")
    return 0


async def cancel_jobs(args: argparse.Namespace) -> int:
    failures = 0
    async with queue_of(args) as queue:
        for job_id in args.ids:
            try:
                if await queue.cancel(job_id):
                    print(f"cancelled job {job_id}")
                else:
                    job = await queue.get_job(job_id)
                    print(f"job {job_id} is {job.status.value} already: nothing to cancel")
            except JobNotFound as exc:
                print(f"aiopgq: {exc}", file=sys.stderr)
                failures += 1
    return 1 if failures else 0


async def retry_jobs(args: argparse.Namespace) -> int:
    by_filter = args.queue is not None or args.task is not None or args.all_failed
    if args.ids and by_filter:
        raise UsageError("give job ids, or --queue/--task/--all-failed, not both")
    if not args.ids and not by_filter:
        raise UsageError("name the jobs to retry: ids, --queue Q, --task T or --all-failed")
    if args.all_failed and (args.queue is not None or args.task is not None):
        raise UsageError("--all-failed retries every failed job: leave out --queue and --task")
    async with queue_of(args) as queue:
        if by_filter:
            count = await queue.retry_failed(queue=args.queue, task=args.task)
            print(f"re-queued {count} failed job{'' if count == 1 else 's'}")
            return 0
        failures = 0
        for job_id in args.ids:
            try:
                if await queue.retry(job_id):
                    print(f"re-queued job {job_id}")
                else:
                    print(await _not_retried(queue, job_id))
            except JobNotFound as exc:
                print(f"aiopgq: {exc}", file=sys.stderr)
                failures += 1
    return 1 if failures else 0


async def _not_retried(queue: Queue, job_id: int) -> str:
    job = await queue.get_job(job_id)
    if job.status.value in ("failed", "cancelled"):
        return (
            f"job {job_id} not re-queued: a live job holds its idempotency key "
            "(retry it when that one has finished)"
        )
    return f"job {job_id} is {job.status.value}: only failed or cancelled jobs are retried"
