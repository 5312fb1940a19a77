"""wf.admin: read and control runs from a program — the API the CLI, the terminal UI and the
HTTP server are built on, so that they only render.

Reading (a ``Store``)::

    page = await wf.admin.list_runs(store, status=["failed"], limit=20)
    detail = await wf.admin.run_detail(store, page.runs[0].id)
    why = wf.admin.explain(detail)          # structured: Reason(kind="retrying", at=..., ...)

Controlling (an ``Engine``, whose store holds the runs)::

    await wf.admin.cancel_tree(engine, run_id, wait=True)
    await wf.admin.wake(engine, run_id)
    await wf.admin.resume_hook(engine, token, {"approved": True})
    async for chunk in wf.admin.follow_stream(store, run_id, "default"): ...
    async for entry in wf.admin.follow_logs(store, run_id, step="fetch", follow=True): ...

Every result is a dataclass with ``to_json()``, the shape the JSON outputs document.

A front end asks through one client, ``Admin``, whichever backend holds the runs: the store
here (``LocalAdmin``) or a ``wf serve`` (``HttpAdmin``, when ``WF_URL`` is set)::

    async with wf.admin.connect() as client:
        page = await client.list_runs(status=["failed"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.admin._client import Admin, LocalAdmin, connect, hook_page, list_hooks, local
    from wf.admin._control import (
        cancel,
        cancel_tree,
        descendants,
        follow_stream,
        resume_hook,
        retry,
        wake,
    )
    from wf.admin._deployments import DeploymentPage
    from wf.admin._detail import detail_json, http_detail_json
    from wf.admin._explain import explain
    from wf.admin._feed import wait_for_change, wait_for_run
    from wf.admin._http import HttpAdmin
    from wf.admin._journal import failures, operations
    from wf.admin._liveness import LivenessProbe
    from wf.admin._logs import LogPage, follow_logs, log_page
    from wf.admin._model import (
        Attempt,
        Compensations,
        ControlResult,
        EventPage,
        Explanation,
        Failure,
        HookPage,
        Operation,
        OperationKind,
        Race,
        Reason,
        ReasonKind,
        RunDetail,
        RunLink,
        RunPage,
        SchedulePage,
        StoreInfo,
        StreamInfo,
        Tone,
    )
    from wf.admin._read import (
        journal_page,
        list_runs,
        list_schedules,
        queue_stats,
        replay_check,
        run_detail,
        schedule_page,
        store_info,
    )
    from wf.admin._start import (
        RunRequest,
        drive_through_outages,
        run_request,
        start_run,
        with_options,
        workflow_at,
    )

# Each name is imported on first use (as the ``wf`` facade does): a command that only lists
# runs loads the reading half, not the controls, starts, deployments or the HTTP client.
_EXPORTS = {
    "Admin": "wf.admin._client",
    "Attempt": "wf.admin._model",
    "Compensations": "wf.admin._model",
    "ControlResult": "wf.admin._model",
    "DeploymentPage": "wf.admin._deployments",
    "EventPage": "wf.admin._model",
    "Explanation": "wf.admin._model",
    "Failure": "wf.admin._model",
    "HookPage": "wf.admin._model",
    "HttpAdmin": "wf.admin._http",
    "LivenessProbe": "wf.admin._liveness",
    "LocalAdmin": "wf.admin._client",
    "LogPage": "wf.admin._logs",
    "Operation": "wf.admin._model",
    "OperationKind": "wf.admin._model",
    "Race": "wf.admin._model",
    "Reason": "wf.admin._model",
    "ReasonKind": "wf.admin._model",
    "RunDetail": "wf.admin._model",
    "RunLink": "wf.admin._model",
    "RunPage": "wf.admin._model",
    "RunRequest": "wf.admin._start",
    "SchedulePage": "wf.admin._model",
    "StoreInfo": "wf.admin._model",
    "StreamInfo": "wf.admin._model",
    "Tone": "wf.admin._model",
    "cancel": "wf.admin._control",
    "cancel_tree": "wf.admin._control",
    "connect": "wf.admin._client",
    "descendants": "wf.admin._control",
    "detail_json": "wf.admin._detail",
    "drive_through_outages": "wf.admin._start",
    "explain": "wf.admin._explain",
    "failures": "wf.admin._journal",
    "follow_logs": "wf.admin._logs",
    "follow_stream": "wf.admin._control",
    "hook_page": "wf.admin._client",
    "http_detail_json": "wf.admin._detail",
    "journal_page": "wf.admin._read",
    "list_hooks": "wf.admin._client",
    "list_runs": "wf.admin._read",
    "list_schedules": "wf.admin._read",
    "local": "wf.admin._client",
    "log_page": "wf.admin._logs",
    "operations": "wf.admin._journal",
    "queue_stats": "wf.admin._read",
    "replay_check": "wf.admin._read",
    "resume_hook": "wf.admin._control",
    "retry": "wf.admin._control",
    "run_detail": "wf.admin._read",
    "run_request": "wf.admin._start",
    "schedule_page": "wf.admin._read",
    "start_run": "wf.admin._start",
    "store_info": "wf.admin._read",
    "wait_for_change": "wf.admin._feed",
    "wait_for_run": "wf.admin._feed",
    "wake": "wf.admin._control",
    "with_options": "wf.admin._start",
    "workflow_at": "wf.admin._start",
}

__all__ = [
    "Admin",
    "Attempt",
    "Compensations",
    "ControlResult",
    "DeploymentPage",
    "EventPage",
    "Explanation",
    "Failure",
    "HookPage",
    "HttpAdmin",
    "LivenessProbe",
    "LocalAdmin",
    "LogPage",
    "Operation",
    "OperationKind",
    "Race",
    "Reason",
    "ReasonKind",
    "RunDetail",
    "RunLink",
    "RunPage",
    "RunRequest",
    "SchedulePage",
    "StoreInfo",
    "StreamInfo",
    "Tone",
    "cancel",
    "cancel_tree",
    "connect",
    "descendants",
    "detail_json",
    "drive_through_outages",
    "explain",
    "failures",
    "follow_logs",
    "follow_stream",
    "hook_page",
    "http_detail_json",
    "journal_page",
    "list_hooks",
    "list_runs",
    "list_schedules",
    "local",
    "log_page",
    "operations",
    "queue_stats",
    "replay_check",
    "resume_hook",
    "retry",
    "run_detail",
    "run_request",
    "schedule_page",
    "start_run",
    "store_info",
    "wait_for_change",
    "wait_for_run",
    "wake",
    "with_options",
    "workflow_at",
]


# Hidden from type checkers: a module ``__getattr__`` would make them accept any name
# (``from wf.admin import cancle``); they see the imports above instead.
if not TYPE_CHECKING:
    from wf._lazy import lazy_names

    __getattr__, __dir__ = lazy_names(globals(), _EXPORTS)
