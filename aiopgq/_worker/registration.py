"""Registration: a starting worker records its tasks' declarations in the tasks table.

Producers that enqueue by name a task they did not register themselves read these
declarations (aiopgq/_client/task_registry.py): the queue, priority and max_attempts to use when
the caller gives none, and the argument names to check the payload against.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

import asyncpg

from .._db.statements import Statements
from .contracts import TaskSpec

logger = logging.getLogger("aiopgq.worker")


def declarations(tasks: Mapping[str, TaskSpec]) -> str:
    """The tasks as the JSON array sql/workers/register_tasks.sql reads, sorted by name."""
    return json.dumps(
        [
            {
                "name": task.name,
                "queue": task.queue_name,
                "priority": task.priority,
                "max_attempts": task.max_attempts,
                "arguments": list(task.check_keywords.accepted),
                "required": list(task.check_keywords.required),
                "any_keyword": task.check_keywords.any_keyword,
            }
            for _, task in sorted(tasks.items())
        ]
    )


async def register_tasks(
    pool: asyncpg.Pool, sql: Statements, tasks: Mapping[str, TaskSpec], worker_id: str
) -> None:
    """Upsert every task of this worker in one statement (nothing when it has none).

    A role without the privilege (table rights given by hand, not by grant_worker)
    logs a warning and the worker runs anyway: only enqueue by name from other
    processes misses the declarations.
    """
    if not tasks:
        return
    try:
        await pool.execute(sql.register_tasks, declarations(tasks), worker_id)
    except asyncpg.InsufficientPrivilegeError as exc:
        logger.warning(
            "worker %s cannot record its tasks in %s.tasks (%s): producers that enqueue "
            "these tasks by name will not get their queue and defaults; grant it with "
            "SELECT %s.grant_worker('<role>')",
            worker_id,
            sql.schema,
            exc,
            sql.schema,
            extra={"worker": worker_id},
        )
