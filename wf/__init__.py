"""wf: durable workflows for Python.

A workflow is an ``async def`` decorated with ``@wf.workflow``; each ``@wf.step`` it calls is
recorded as it completes, so after a crash, a deploy or a three-day sleep the workflow is replayed
and completed steps return their recorded results instead of running again.

Every public name is re-exported here from private modules; ``wf.__all__`` is the contract.
"""

from __future__ import annotations

from wf._exceptions import (
    Cancelled,
    FatalError,
    HookError,
    InputValidationError,
    LoadError,
    NondeterminismError,
    RetryableError,
    RunCancelled,
    RunFailed,
    RunNotFound,
    StepFailed,
    StoreCorrupted,
    StoreError,
    UsageError,
    ValueEncodingError,
    WFError,
    WorkflowNotFound,
)
from wf.engine._child import ChildRun
from wf.engine._compose import deadline, first, map, rollback, select, timeout
from wf.engine._engine import Engine, Run, configure, current_engine, get_run, start
from wf.engine._hooks import Hook, create_hook, resume_hook
from wf.engine._patch import deprecate_patch, patched
from wf.engine._engine import set_default_engine_factory as _set_default_engine_factory
from wf.engine._ops import now, random, sleep, sleep_until, uuid4
from wf.engine._step import Step, step, step_id
from wf.engine._streams import StreamWriter, stream_writer
from wf.engine._worker import Worker
from wf.engine._workflow import Workflow, workflow
from wf.store import RunRecord, RunStatus

__version__ = "0.1.0"

__all__ = [
    "Cancelled",
    "ChildRun",
    "Engine",
    "FatalError",
    "Hook",
    "HookError",
    "InputValidationError",
    "LoadError",
    "NondeterminismError",
    "RetryableError",
    "Run",
    "RunCancelled",
    "RunFailed",
    "RunNotFound",
    "RunRecord",
    "RunStatus",
    "Step",
    "StepFailed",
    "StoreCorrupted",
    "StoreError",
    "StreamWriter",
    "UsageError",
    "ValueEncodingError",
    "WFError",
    "Worker",
    "Workflow",
    "WorkflowNotFound",
    "configure",
    "create_hook",
    "current_engine",
    "deadline",
    "deprecate_patch",
    "first",
    "get_run",
    "map",
    "now",
    "patched",
    "random",
    "resume_hook",
    "rollback",
    "select",
    "sleep",
    "sleep_until",
    "start",
    "step",
    "step_id",
    "stream_writer",
    "timeout",
    "uuid4",
    "workflow",
]


def _local_engine() -> Engine:
    # Imported here so that `import wf` stays light and the kernel never names a concrete store.
    from wf.store.local import LocalStore, default_store_path

    return Engine(LocalStore(default_store_path()))


_set_default_engine_factory(_local_engine)
