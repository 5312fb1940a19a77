"""Starting runs from a request: the workflow by name or target, its input, the options."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from wf._exceptions import WorkflowNotFound
from wf._loader import load_off_loop
from wf.serve._errors import ApiError
from wf.serve._params import body_object

if TYPE_CHECKING:
    from wf.engine._workflow import Workflow
    from wf.serve._state import ServerState
    from wf.store import RunRecord

_KEYS = frozenset({"workflow", "target", "input", "args", "kwargs", "id", "options"})


def find_workflow(name: str | None, target: str | None) -> tuple[Workflow[Any, Any], str | None]:
    """The workflow a request names, and the target other processes import it by.

    ``target`` (``module:attr``) is imported; a ``workflow`` name is looked up among the
    workflows this process declared, else imported when it is a default ``module:qualname``.
    Either is imported only when it is a module of the project (``_targets``).
    """
    from wf.admin import workflow_at
    from wf.engine._workflow import resolve_workflow
    from wf.serve._targets import check_target

    if target is not None:
        check_target(target)
        return workflow_at(target)  # not a workflow: a UsageError, answered 400 bad_request
    assert name is not None
    try:
        workflow = resolve_workflow(name, None)
    except WorkflowNotFound:
        if ":" not in name:
            raise ApiError(
                400, "workflow_not_found", f"no workflow named {name!r} is known to this server"
            ) from None
        check_target(name)
        workflow = resolve_workflow(name, name)
    return workflow, workflow.target


def _imported(name: str) -> bool:
    """Whether finding ``name`` (a workflow name, a ``module:attr`` target) imports nothing:
    a plain name is only looked up; a target's module is imported already (and done)."""
    module, sep, _ = name.rpartition(":")
    if not sep:
        return True
    loaded = sys.modules.get(module)
    spec = getattr(loaded, "__spec__", None)
    return loaded is not None and not getattr(spec, "_initializing", False)


async def start(server: ServerState, body: Any) -> tuple[RunRecord, bool]:
    """Start the run a ``POST /api/v1/runs`` body describes; its record, and whether it is
    new (``wf.ResultExpired`` for a deleted run's id, as ``LocalAdmin.start``).

    Body: ``workflow`` (a name) or ``target`` (``module:attr``); ``input`` (as ``wf run
    --input``: an object by name, an array by position, any other value the single argument)
    or ``args`` / ``kwargs``; ``id``; ``options`` (``Workflow.with_options``). The run is made
    by ``wf.admin.run_request`` and ``start_checked``, as ``LocalAdmin.start`` makes one.
    """
    from wf.admin import run_request
    from wf.admin._start import start_checked

    body = body_object(body, _KEYS)
    name, target = body.get("workflow"), body.get("target")
    if (name is None) == (target is None):
        raise ApiError(400, "bad_request", 'give either "workflow" (a name) or "target"')
    given = target if target is not None else name
    if not isinstance(given, str):
        raise ApiError(400, "bad_request", '"workflow" / "target" is a string')
    if _imported(given):
        workflow, canonical = find_workflow(name, target)  # nothing to import: at once
    else:
        async with server.imports:
            workflow, canonical = await load_off_loop(find_workflow, name, target)
    direct = "args" in body or "kwargs" in body
    if direct and "input" in body:
        raise ApiError(400, "bad_request", 'give "input" or "args"/"kwargs", not both')
    request = run_request(
        workflow,
        body.get("input"),
        # Only null is "none": a falsy value of another type (false, "", 0) is refused as
        # any value of the wrong type is.
        args=_given(body.get("args"), []) if direct else None,
        kwargs=_given(body.get("kwargs"), {}) if direct else None,
        options=body.get("options"),
        target=canonical,
    )
    run_id = body.get("id")
    if run_id is not None and not isinstance(run_id, str):
        raise ApiError(400, "bad_request", '"id" is a string')
    record, created = await start_checked(
        server.engine, request, run_id=run_id, detach=not server.drive
    )
    return record, created


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


async def retry(server: ServerState, run_id: str) -> str:
    """Queue another attempt of a failed run (``wf.admin.retry``), driven here if this server
    drives runs. 409 for a run that has not failed."""
    from wf import admin
    from wf._exceptions import UsageError

    try:
        await admin.retry(server.engine, run_id)
    except UsageError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    if server.drive:
        server.engine.drive_soon(run_id)
    return run_id
