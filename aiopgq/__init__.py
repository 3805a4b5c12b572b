"""aiopgq: an asyncio job queue on PostgreSQL.

>>> queue = Queue("postgresql://localhost/app")
>>> @queue.task(name="demo.add")
... async def add(a: int, b: int) -> int: return a + b
"""

from ._client.job_steps import JobStep, JobSteps
from ._client.queue import Queue
from ._client.results import JobCancelled, JobFailed
from ._client.sync import SyncQueue
from ._client.unique import DuplicateJob
from ._client.workflow_builder import WorkflowBuilder, WorkflowNode
from ._client.workflows import Workflow, WorkflowGroup, WorkflowJob
from ._context import JobContext, Lease
from ._db.connection import Connection
from ._errors import (
    Abort,
    CannotConnect,
    ConfigurationError,
    EmbeddedServerError,
    Error,
    JobNotFound,
    LeaseLost,
    PayloadTooLarge,
    QueueNotOpen,
    SchemaError,
    Snooze,
    StepMismatch,
    TaskNotFound,
    WorkflowNotFound,
)
from ._models import (
    ArchiveLayout,
    ArchivePartition,
    Job,
    JobError,
    JobEvent,
    JobStatus,
    QueueSettings,
    QueueStats,
    current_job,
)
from ._observer import Observer
from ._retry import Retry
from ._task import Task
from ._version import __version__ as __version__
from ._worker.processes import WorkerProcesses, run_workers
from ._worker.worker import Worker

__all__ = [
    "Abort",
    "ArchiveLayout",
    "ArchivePartition",
    "CannotConnect",
    "ConfigurationError",
    "Connection",
    "DuplicateJob",
    "EmbeddedServerError",
    "Error",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobEvent",
    "JobFailed",
    "JobNotFound",
    "JobStatus",
    "JobStep",
    "JobSteps",
    "Lease",
    "LeaseLost",
    "Observer",
    "PayloadTooLarge",
    "Queue",
    "QueueNotOpen",
    "QueueSettings",
    "QueueStats",
    "Retry",
    "SchemaError",
    "Snooze",
    "StepMismatch",
    "SyncQueue",
    "Task",
    "TaskNotFound",
    "Worker",
    "WorkerProcesses",
    "Workflow",
    "WorkflowBuilder",
    "WorkflowGroup",
    "WorkflowJob",
    "WorkflowNode",
    "WorkflowNotFound",
    "current_job",
    "run_workers",
]


# Reprs and docs say aiopgq.Queue, not the private module that defines it.
for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and not isinstance(_obj, str):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):  # typing.Union objects keep theirs
            pass
del _name, _obj
