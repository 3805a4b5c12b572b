"""aiopgq: an asyncio job queue on PostgreSQL.

>>> queue = Queue("postgresql://localhost/app")
>>> @queue.task(name="demo.add")
... async def add(a: int, b: int) -> int: return a + b
"""

from ._errors import (
    ConfigurationError,
    EmbeddedServerError,
    Error,
    JobNotFound,
    SchemaError,
    TaskNotFound,
)
from ._job import Job, JobStatus, current_job
from ._queue import Queue
from ._retry import Retry
from ._task import Task
from ._worker import Worker

__all__ = [
    "ConfigurationError",
    "EmbeddedServerError",
    "Error",
    "Job",
    "JobNotFound",
    "JobStatus",
    "Queue",
    "Retry",
    "SchemaError",
    "Task",
    "TaskNotFound",
    "Worker",
    "current_job",
]

__version__ = "0.1.0"
