"""``wf.start``, ``wf.get_run`` and ``wf.resume_hook``: to a ``wf serve`` when the program
names one (``wf.configure(url=...)``, else ``WF_URL``), otherwise to the engine here.

The choice is made here, above the kernel: the engine never asks whether it is remote
(``tests/test_layers.py``). Inside a workflow a start is a child run of the engine that drives
it, whatever the configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, overload

# In wf._setup, so that wf.admin's connect() and reading() ask it without importing the engine.
from wf._setup import remote
from wf.engine import _engine, _hooks
from wf.engine._context import current_run

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike
    from wf.engine._ref import WorkflowRef
    from wf.engine._run import Run
    from wf.engine._workflow import Workflow

R = TypeVar("R")


@overload
async def start(
    workflow: Workflow[..., R] | WorkflowRef[R],
    *args: Any,
    run_id: str | None = None,
    detach: bool = False,
    **kwargs: Any,
) -> Run[R]: ...


@overload
async def start(
    workflow: str,
    *args: Any,
    run_id: str | None = None,
    detach: bool = False,
    **kwargs: Any,
) -> Run[Any]: ...


async def start(
    workflow: Workflow[..., Any] | WorkflowRef[Any] | str,
    *args: Any,
    run_id: str | None = None,
    detach: bool = False,
    **kwargs: Any,
) -> Run[Any]:
    """Start a run of ``workflow`` and return its handle (see ``wf.engine._engine.start``);
    with a server configured, the server creates and drives it."""
    client = remote() if current_run() is None else None
    if client is not None:
        return await client.start(workflow, args, kwargs, run_id=run_id, detach=detach)
    return await _engine.start(workflow, *args, run_id=run_id, detach=detach, **kwargs)


start.__doc__ = _engine.start.__doc__


def get_run(run_id: str) -> Run[Any]:
    """A handle on an existing run (``RunNotFound`` is raised by its methods if it is missing).

    With a remote server configured (``wf.configure(url=...)`` / ``WF_URL``), a handle that
    talks to it.
    """
    from wf.store._ids import validate_run_id

    client = remote()
    if client is not None:
        return client.run(validate_run_id(run_id))
    return _engine.get_run(run_id)


async def resume_hook(
    token: str, payload: Any, *, key: str | None = None, engine: EngineLike | None = None
) -> Run[Any]:
    """Deliver ``payload`` to the hook with ``token``; returns the run that owns it (see
    ``wf.engine._hooks.resume_hook``); with a server configured (and no ``engine`` given),
    the server delivers it."""
    from wf._exceptions import UsageError
    from wf.store._limits import check_key, check_name

    if current_run() is not None:
        raise UsageError("wf.resume_hook() is I/O: call it from a step, not from workflow code")
    client = remote() if engine is None else None
    if client is not None:
        if key is not None:
            check_key(key)
        return await client.resume_hook(check_name("a hook token", token), payload, key=key)
    return await _hooks.resume_hook(token, payload, key=key, engine=engine)


resume_hook.__doc__ = _hooks.resume_hook.__doc__
