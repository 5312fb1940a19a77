"""wf: durable workflows for Python.

A workflow is an ``async def`` decorated with ``@wf.workflow``; each ``@wf.step`` it calls is
recorded as it completes, so after a crash, a deploy or a three-day sleep the workflow is replayed
and completed steps return their recorded results instead of running again.

Every public name is re-exported here from private modules; ``wf.__all__`` is the contract. The
names are imported on first use, so ``import wf`` (and ``wf --help``) stays fast.
"""

from __future__ import annotations

# First, before any import that is not already done (typing, importlib): a project's
# typing.py would be what they get.
from wf import _shadows

if _shadows.started_as_python_m_wf():
    # `python -m wf` is starting: the current directory went first on sys.path, and this
    # package's imports are the first to search it. The standard modules wf needs that its
    # files would hide come from the standard library, not from the project's json.py or
    # queue.py (see wf._shadows).
    _shadows.shield_current_directory()

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # The subpackages ``__getattr__`` imports on first use (``_SUBPACKAGES``).
    from wf import admin as admin
    from wf import ai as ai
    from wf import otel as otel
    from wf import testing as testing
    from wf._entry import get_run, resume_hook, start
    from wf._exceptions import (
        Cancelled,
        FatalError,
        HookError,
        InputValidationError,
        LeaseLost,
        LoadError,
        NondeterminismError,
        OutputValidationError,
        ResultExpired,
        RetryableError,
        RunAlreadyExists,
        RunCancelled,
        RunFailed,
        RunNotFound,
        RunStalled,
        StepFailed,
        StoreCorrupted,
        StoreError,
        StoreUnavailable,
        StoreVersionError,
        StreamIncomplete,
        StreamNotFound,
        UsageError,
        ValueEncodingError,
        WFError,
        WorkflowNotFound,
    )
    from wf._setup import configure
    from wf.engine._child import ChildRun
    from wf.engine._codec import decode, encode
    from wf.engine._compose import deadline, first, map, rollback, select, timeout
    from wf.engine._current import current_engine
    from wf.engine._engine import Engine
    from wf.engine._hooks import Hook, create_hook
    from wf.engine._ops import now, random, sleep, sleep_until, uuid4
    from wf.engine._patch import deprecate_patch, patched
    from wf.engine._queueing import exp_backoff
    from wf.engine._ref import WorkflowRef, ref
    from wf.engine._run import Run
    from wf.engine._schedules import schedule, schedules, unschedule
    from wf.engine._step import Step, cancel_requested, step, step_id
    from wf.engine._streams import StreamWriter, stream_writer
    from wf.engine._watch import RunEvent, progress
    from wf.engine._webhooks import Webhook, WebhookRequest, create_webhook
    from wf.engine._worker import Worker
    from wf.engine._workflow import Workflow, workflow
    from wf.store import RunRecord, RunStatus, Schedule

__version__ = "0.1.0"

_EXPORTS = {
    "Cancelled": "wf._exceptions",
    "ChildRun": "wf.engine._child",
    "Engine": "wf.engine._engine",
    "FatalError": "wf._exceptions",
    "Hook": "wf.engine._hooks",
    "HookError": "wf._exceptions",
    "InputValidationError": "wf._exceptions",
    "LeaseLost": "wf._exceptions",
    "LoadError": "wf._exceptions",
    "NondeterminismError": "wf._exceptions",
    "OutputValidationError": "wf._exceptions",
    "ResultExpired": "wf._exceptions",
    "RetryableError": "wf._exceptions",
    "Run": "wf.engine._run",
    "RunAlreadyExists": "wf._exceptions",
    "RunCancelled": "wf._exceptions",
    "RunEvent": "wf.engine._watch",
    "RunFailed": "wf._exceptions",
    "RunNotFound": "wf._exceptions",
    "RunStalled": "wf._exceptions",
    "RunRecord": "wf.store",
    "RunStatus": "wf.store",
    "Schedule": "wf.store",
    "Step": "wf.engine._step",
    "StepFailed": "wf._exceptions",
    "StoreCorrupted": "wf._exceptions",
    "StoreError": "wf._exceptions",
    "StoreUnavailable": "wf._exceptions",
    "StoreVersionError": "wf._exceptions",
    "StreamIncomplete": "wf._exceptions",
    "StreamNotFound": "wf._exceptions",
    "StreamWriter": "wf.engine._streams",
    "UsageError": "wf._exceptions",
    "ValueEncodingError": "wf._exceptions",
    "WFError": "wf._exceptions",
    "Webhook": "wf.engine._webhooks",
    "WebhookRequest": "wf.engine._webhooks",
    "Worker": "wf.engine._worker",
    "Workflow": "wf.engine._workflow",
    "WorkflowNotFound": "wf._exceptions",
    "WorkflowRef": "wf.engine._ref",
    "cancel_requested": "wf.engine._step",
    "configure": "wf._setup",
    "create_hook": "wf.engine._hooks",
    "create_webhook": "wf.engine._webhooks",
    "current_engine": "wf.engine._current",
    "deadline": "wf.engine._compose",
    "decode": "wf.engine._codec",
    "deprecate_patch": "wf.engine._patch",
    "encode": "wf.engine._codec",
    "exp_backoff": "wf.engine._queueing",
    "first": "wf.engine._compose",
    "get_run": "wf._entry",
    "map": "wf.engine._compose",
    "now": "wf.engine._ops",
    "patched": "wf.engine._patch",
    "progress": "wf.engine._watch",
    "random": "wf.engine._ops",
    "ref": "wf.engine._ref",
    "resume_hook": "wf._entry",
    "rollback": "wf.engine._compose",
    "schedule": "wf.engine._schedules",
    "schedules": "wf.engine._schedules",
    "select": "wf.engine._compose",
    "sleep": "wf.engine._ops",
    "sleep_until": "wf.engine._ops",
    "start": "wf._entry",
    "step": "wf.engine._step",
    "step_id": "wf.engine._step",
    "stream_writer": "wf.engine._streams",
    "timeout": "wf.engine._compose",
    "unschedule": "wf.engine._schedules",
    "uuid4": "wf.engine._ops",
    "workflow": "wf.engine._workflow",
}

__all__ = [
    "Cancelled",
    "ChildRun",
    "Engine",
    "FatalError",
    "Hook",
    "HookError",
    "InputValidationError",
    "LeaseLost",
    "LoadError",
    "NondeterminismError",
    "OutputValidationError",
    "ResultExpired",
    "RetryableError",
    "Run",
    "RunAlreadyExists",
    "RunCancelled",
    "RunEvent",
    "RunFailed",
    "RunNotFound",
    "RunRecord",
    "RunStalled",
    "RunStatus",
    "Schedule",
    "Step",
    "StepFailed",
    "StoreCorrupted",
    "StoreError",
    "StoreUnavailable",
    "StoreVersionError",
    "StreamIncomplete",
    "StreamNotFound",
    "StreamWriter",
    "UsageError",
    "ValueEncodingError",
    "WFError",
    "Webhook",
    "WebhookRequest",
    "Worker",
    "Workflow",
    "WorkflowNotFound",
    "WorkflowRef",
    "cancel_requested",
    "configure",
    "create_hook",
    "create_webhook",
    "current_engine",
    "deadline",
    "decode",
    "deprecate_patch",
    "encode",
    "exp_backoff",
    "first",
    "get_run",
    "map",
    "now",
    "patched",
    "progress",
    "random",
    "ref",
    "resume_hook",
    "rollback",
    "schedule",
    "schedules",
    "select",
    "sleep",
    "sleep_until",
    "start",
    "step",
    "step_id",
    "stream_writer",
    "timeout",
    "unschedule",
    "uuid4",
    "workflow",
]


# The kernel learns here how to build the default engine (from the project's configuration):
# every import of a wf module runs this file first, so the kernel never imports wf._config.
from wf import _setup as _setup  # noqa: E402

# Subpackages imported on first use, so ``import wf; wf.testing.engine()`` works while ``import
# wf`` stays cheap: ``wf.ai`` needs ``wf-durable[ai]``, ``wf.otel`` OpenTelemetry; ``wf.admin``
# and ``wf.testing`` are not needed by programs that only run workflows.
_SUBPACKAGES = {"admin", "ai", "otel", "testing"}


# Hidden from type checkers: a module ``__getattr__`` would make them accept any name
# (``wf.workflw``); they see the imports above instead.
if not TYPE_CHECKING:
    from wf._lazy import lazy_names

    __getattr__, __dir__ = lazy_names(globals(), _EXPORTS, _SUBPACKAGES)
