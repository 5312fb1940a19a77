"""Starting a run from JSON: the one way a front end makes a run of a workflow.

``wf run``, ``wf serve``'s ``POST /api/v1/runs``, ``wf dev --run`` and
``wf.admin.LocalAdmin.start`` all come here: they differ in how they find the workflow (a
target on the command line, a name or a project target in a request) and in what they do
with the run, not in how its input is bound, its options applied or the run created::

    workflow, target = workflow_at("shop.flows:order")
    request = run_request(workflow, {"order_id": "A7"}, target=target)  # checked, no store
    run = await start_run(engine, request)                               # queued
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wf._exceptions import UsageError

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.engine._run import Run
    from wf.engine._workflow import Workflow
    from wf.store import RunRecord


def workflow_at(target: str) -> tuple[Workflow[Any, Any], str]:
    """The workflow a ``module:attr`` / ``path/file.py:attr`` target names, and the target
    other processes import it by. ``wf.UsageError`` (listing the module's workflows) when the
    target is something else; ``wf.LoadError`` when it cannot be imported."""
    from wf._loader import canonical_target, load_target, split_target, workflows_hint
    from wf.engine._workflow import Workflow

    found = load_target(target)
    if not isinstance(found, Workflow):
        _, attr = split_target(target)
        module = sys.modules.get(getattr(found, "__module__", "") or "")
        listing = workflows_hint(module, attr) if module is not None else ""
        from wf.store._limits import with_article

        raise UsageError(
            f"{target!r} is {with_article(type(found).__name__)}, not a workflow "
            f"(declare it with @wf.workflow){listing}"
        )
    return found, canonical_target(target, found)


def with_options(workflow: Workflow[Any, Any], options: Mapping[str, Any] | None) -> Any:
    """``workflow.with_options(**options)`` for options that came as JSON or from a command
    line: ``at`` may be ISO 8601 text; a value Python options never see (a 1e999-sized
    integer, a wrong type) is a ``wf.UsageError``, not a crash."""
    if options is None:
        return workflow
    if not isinstance(options, Mapping):  # false, [], "" too: not "no options"
        raise UsageError("options: expected an object of run options")
    if not options:
        return workflow
    at = options.get("at")
    if isinstance(at, str):
        import datetime as dt

        try:
            options = {**options, "at": dt.datetime.fromisoformat(at)}
        except ValueError:
            raise UsageError(f"options.at is not an ISO 8601 time: {at!r}") from None
    try:
        return workflow.with_options(**options)
    except (TypeError, ValueError, OverflowError) as exc:
        raise UsageError(f"options: {exc}") from None


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """A run to create, checked: the workflow (its options applied), its bound arguments, and
    the target other processes import it by."""

    workflow: Workflow[Any, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    target: str | None = None


def run_request(
    workflow: Workflow[Any, Any],
    input: Any = None,
    *,
    args: list[Any] | tuple[Any, ...] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    target: str | None = None,
) -> RunRequest:
    """Check everything about a run before it exists (no store is touched).

    ``input`` is JSON as ``wf run --input`` takes it (an object maps parameters by name, an
    array gives them by position, another value is the single argument); ``args`` / ``kwargs``
    give the arguments directly instead. ``options`` are ``with_options``'s. ``target`` is how
    other processes import the workflow (``workflow_at``'s second value). Input, arguments or
    options that do not fit are a ``wf.UsageError``.
    """
    from wf.engine._signature import bind_input

    if args is not None or kwargs is not None:
        if input is not None:
            raise UsageError('give "input" or "args"/"kwargs", not both')
        args = () if args is None else args
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(args, list | tuple) or not isinstance(kwargs, Mapping):
            raise UsageError('"args" is an array and "kwargs" an object')
        bound_args, bound_kwargs = tuple(args), dict(kwargs)
    else:
        bound_args, bound_kwargs = bind_input(workflow.fn, input)
    return RunRequest(with_options(workflow, options), bound_args, dict(bound_kwargs), target)


async def start_run(
    engine: Engine, request: RunRequest, *, run_id: str | None = None, detach: bool = True
) -> Run[Any]:
    """Create the run ``request`` describes on ``engine`` (``run_id``: its id, else a new
    one) and return its handle; ``detach`` (the default) only queues it, otherwise this
    process drives it."""
    return await engine.start(
        request.workflow,
        request.args,
        request.kwargs,
        run_id=run_id,
        detach=detach,
        target=request.target,
    )


async def start_checked(
    engine: Engine, request: RunRequest, *, run_id: str | None = None, detach: bool = True
) -> tuple[RunRecord, bool]:
    """``start_run``, for a front end that answers with the run rather than drive it: the
    run's record and whether this call created it. A ``run_id`` that is a deleted run's (its
    tombstone kept: the id is never run again) is ``wf.ResultExpired`` saying when and why it
    was deleted, as every reader of that run says; ``LocalAdmin.start`` and ``POST
    /api/v1/runs`` both come here, so both backends answer alike."""
    from wf._exceptions import RunNotFound
    from wf.admin._read import existing_run
    from wf.store._ids import validate_run_id

    existed = False
    if run_id is not None:
        try:
            await engine.store.get_run(validate_run_id(run_id))
            existed = True
        except RunNotFound:
            pass  # new, or a deleted run's: start_run tells which
    run = await start_run(engine, request, run_id=run_id, detach=detach)
    return await existing_run(engine.store, run.id), not existed


RIDE_OUT_CUTS = 10
"""Drives of its run that a store failing for now may cut before ``drive_through_outages``
gives up: a connection that drops again and again is no blip."""


async def drive_through_outages(
    run: Run[Any],
    *,
    on_failed: Callable[[BaseException, float], None],
    on_back: Callable[[float], None],
) -> None:
    """Drive ``run`` here until it ends (its outcome, failed or cancelled too, is read from its
    record afterwards), as ``wf run`` does in the foreground.

    A store that fails for now under the drive (``wf.StoreUnavailable``, ``wf.LeaseLost``: a
    dropped connection, a server restarting or refusing writes) is waited out as a worker waits
    it out: ``on_failed(error, limit)`` is told once, the store is tried again after 0.5 s,
    then up to every 5 s, for up to the worker's outage limit (``OUTAGE_LIMIT``, 300 s) in a
    row; ``on_back(seconds)`` is told when it answers, and the run is driven again from its
    journal. It answers when a read of the run and a write (``Store.probe_write``: one that
    changes nothing) both succeed: a server that answers reads but refuses writes (out
    of memory, a read-only replica, a disk it cannot save to) is still failing, and the drive
    is not started again to be cut again. Past the limit, or after ``RIDE_OUT_CUTS`` cut
    drives, the failure is raised (the run stays for ``wf worker``)."""
    import asyncio
    import contextlib

    from wf._exceptions import LeaseLost, RunCancelled, RunFailed, StoreUnavailable
    from wf.engine._worker import OUTAGE_LIMIT, OUTAGE_RETRY

    store = run.engine.store

    async def answers() -> None:
        await run.status()
        await store.probe_write()

    cuts = 0
    while True:
        try:
            with contextlib.suppress(RunFailed, RunCancelled):
                await run.result()
            return
        except (LeaseLost, StoreUnavailable) as error:
            cuts += 1
            if cuts > RIDE_OUT_CUTS:
                raise
            on_failed(error, OUTAGE_LIMIT)
        loop = asyncio.get_running_loop()
        since = loop.time()
        pause = OUTAGE_RETRY[0]
        while True:
            await asyncio.sleep(pause)
            pause = min(pause * 2, OUTAGE_RETRY[1])
            try:
                await answers()
            except StoreUnavailable:
                if loop.time() - since >= OUTAGE_LIMIT:
                    raise
                continue
            on_back(loop.time() - since)
            break
