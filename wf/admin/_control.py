"""Controlling runs: cancel one or a whole tree, wake, resume a hook, follow a byte stream.

Requests are durable messages in a run's inbox; whoever drives the run applies them. With an
engine whose process drives runs (``wf worker``, ``wf serve``) a run nobody drives is driven
here; a caller that exits right after a request without ``wait`` abandons such drives (the
CLI does), which leaves the run due for the next worker, as a crash would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from wf._exceptions import RunCancelled, RunFailed, StoreCorrupted, UsageError
from wf.admin._model import ControlResult
from wf.store._faults import Fault, collect_faults, named_place
from wf.store._ids import validate_run_id

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.engine._run import Run
    from wf.engine._watch import RunEvent
    from wf.store import HookRecord, Store

_TREE_ROUNDS = 100
"""A tree that keeps growing while it is cancelled is reported after this many rounds, not
chased forever."""


def _run(engine: Engine, run_id: str) -> Run[Any]:
    from wf.engine._run import Run

    return Run(validate_run_id(run_id), engine)


async def cancel(
    engine: Engine,
    run_id: str,
    *,
    wait: bool = False,
    within: float | None = None,
    stop: asyncio.Event | None = None,
) -> ControlResult:
    """Ask the run to stop at its next durable operation; with ``wait``, until it has ended,
    for at most ``within`` seconds and not past ``stop`` being set (a server's client went
    away): ``status`` then says where it is. The request is stored first either way.

    ``sent`` is False when it had already ended. Raises ``wf.RunNotFound``.
    """
    run = _run(engine, run_id)
    sent = await run.cancel()
    undriven = await _follow(run, _deadline(within), stop) if wait and sent else None
    return ControlResult(run.id, sent, (await run.status()).value, undriven)


async def wake(
    engine: Engine,
    run_id: str,
    *,
    wait: bool = False,
    within: float | None = None,
    stop: asyncio.Event | None = None,
) -> ControlResult:
    """End the run's current sleeps now; with ``wait``, until it has ended (bounded as
    ``cancel``'s wait is).

    A suspended run that waits on no sleep (a hook, a child, a ``wf.timeout``, a step's retry)
    is sent nothing, ``refused`` saying what it waits for: a wake-up would end none of those,
    only, later, the run's next sleep as it starts.
    """
    from wf.admin._words import nothing_to_wake

    run = _run(engine, run_id)
    record = await run.record()
    refused = nothing_to_wake(record)
    if refused is not None:
        return ControlResult(run.id, False, record.status.value, refused=refused)
    sent = await run.wake_up()
    undriven = await _follow(run, _deadline(within), stop) if wait and sent else None
    return ControlResult(run.id, sent, (await run.status()).value, undriven)


def _deadline(within: float | None) -> float | None:
    return None if within is None else asyncio.get_running_loop().time() + within


def _gave_up(deadline: float | None, stop: asyncio.Event | None) -> bool:
    late = deadline is not None and asyncio.get_running_loop().time() >= deadline
    return late or (stop is not None and stop.is_set())


async def _follow(
    run: Run[Any], deadline: float | None = None, stop: asyncio.Event | None = None
) -> str | None:
    """Wait for the run to end, after its request is stored, until ``deadline`` (the loop's
    time) or ``stop``; None, or why it cannot be driven here (its workflow does not import):
    the request stands all the same, and must not be reported as one that was not made."""
    ending = asyncio.ensure_future(_ended(run))
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    timeout = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
    try:
        await asyncio.wait(
            {ending, *filter(None, [stopping])},
            timeout=timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        for task in (ending, stopping):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return ending.result() if ending.done() and not ending.cancelled() else None


async def _ended(run: Run[Any]) -> str | None:
    try:
        with contextlib.suppress(RunFailed, RunCancelled):
            await run.result()
    except UsageError as exc:
        return str(exc)
    return None


async def descendants(store: Store, run_id: str) -> list[str]:
    """Ids of every run below ``run_id`` (children via ``parent_id``, recursively), top-down.

    A run whose children cannot be listed (its children's index damaged: on Redis, ``ix:p:…``
    of another type) is noted as damage (``children``, the run's id) and passed over: the runs
    found elsewhere in the tree are still listed."""
    found: list[str] = []
    parents = [run_id]
    while parents:
        parent = parents.pop(0)
        try:
            children = await store.list_runs(parent_id=parent, limit=100_000)
        except StoreCorrupted as error:
            # The fault stays with that index: its runs are the only ones not reached.
            store.faults.note("children", parent, named_place(error), error)
            continue
        # list_runs is newest first; oldest first reads like the order the tree was built.
        for child in reversed(children):
            if child.id not in found:
                found.append(child.id)
                parents.append(child.id)
    return found


async def cancel_tree(
    engine: Engine,
    run_id: str,
    *,
    wait: bool = False,
    within: float | None = None,
    stop: asyncio.Event | None = None,
) -> list[ControlResult]:
    """Cancel a run and all its descendants; one result per run, the root first.

    Every request is posted first, top-down, so that a parent stops at once rather than seeing
    its children fail one by one (a child cancelled alone surfaces in its parent as
    ``RunCancelled`` from ``child.result()``, which the parent might handle and carry on).
    Then, with ``wait``, each run is awaited (driven here if nobody else drives it). A run may
    start children while it winds down (in a ``finally`` or a compensation), so the tree is
    listed again until no live run is left in it; all of that for at most ``within`` seconds
    and not past ``stop`` (as ``cancel``'s wait). Raises ``wf.RunNotFound`` for an unknown
    root before anything is sent. A run whose children's index cannot be read is cancelled
    all the same, and its result names the index (``ControlResult.damaged``): the runs below it
    that only that index names are not reached, the rest of the tree is.
    """
    deadline = _deadline(within)
    root = _run(engine, run_id)
    await root.record()
    sent: dict[str, bool] = {}
    undriven: dict[str, str] = {}
    damaged: dict[str, list[Fault]] = {}
    for _ in range(_TREE_ROUNDS):
        with collect_faults() as found:
            tree = [root.id, *await descendants(engine.store, root.id)]
        for fault in found:
            if fault.kind != "children" or fault.item not in tree:
                # No result to carry it (a child whose record cannot be read is not listed):
                # said as it would be without the collecting, logged and in the store's faults.
                engine.store.faults.note_collected(fault)
            elif fault not in damaged.setdefault(fault.item, []):
                damaged[fault.item].append(fault)
        new = [rid for rid in tree if rid not in sent]
        if not new:
            break
        for rid in new:
            sent[rid] = await _run(engine, rid).cancel(wait=False)
        if not wait:
            break
        for rid in new:
            if sent[rid] and not _gave_up(deadline, stop):
                # Wait without sending again: a second request could reach the run while
                # its compensations run and cut them short.
                problem = await _follow(_run(engine, rid), deadline, stop)
                if problem is not None:
                    undriven[rid] = problem
        if undriven or _gave_up(deadline, stop):
            break  # the rest cannot be followed here either; every request is stored
    return [
        ControlResult(
            rid,
            was_sent,
            (await _run(engine, rid).status()).value,
            undriven.get(rid),
            damaged=tuple(damaged.get(rid, ())),
        )
        for rid, was_sent in sent.items()
    ]


async def retry(engine: Engine, run_id: str) -> str:
    """Queue another attempt of a failed run (``wf.Run.retry``): completed steps replay, the
    failed one runs again; the run's id. ``wf.RunNotFound`` for an unknown run,
    ``wf.UsageError`` for one that has not failed. A run this engine drove is let go of
    first (its driver ends just after the outcome is recorded)."""
    import asyncio

    run = _run(engine, run_id)
    await run.record()  # an unknown run is RunNotFound, not a UsageError
    driver = engine.drivers.get(run.id)
    if driver is not None:
        await asyncio.wait({driver}, timeout=5.0)
    await run.retry()
    return run.id


async def resume_hook(engine: Engine, token: str, payload: Any, *, key: str | None = None) -> str:
    """Deliver ``payload`` to the hook with ``token`` (validated against its type first);
    return the id of the run that owns it. Raises ``wf.HookError``. With ``key`` (an
    idempotency key), a repeat delivers nothing new and returns the same run."""
    from wf.engine._hooks import resume_hook as deliver

    return (await deliver(token, payload, key=key, engine=engine)).id


async def resume_hook_sent(
    engine: Engine, token: str, payload: Any, *, key: str | None = None
) -> tuple[str, str | None]:
    """``resume_hook``, and the id of the inbox message that carried the payload (None for a
    keyed delivery): ``_journal.refused_payload`` tells from it whether the run refused the
    payload."""
    from wf.engine._hooks import resume_hook_sent as deliver

    run, message = await deliver(token, payload, key=key, engine=engine)
    return run.id, message


async def live_hook(store: Store, token: str) -> HookRecord:
    """The hook with ``token`` while its run waits on it; ``wf.HookError`` (the words every
    front end gives) for a token no live hook has: unknown, disposed, or its run ended (or was
    deleted). ``POST /api/v1/hooks/{token}`` answers that error as its 404."""
    from wf._exceptions import RunNotFound
    from wf.engine._hooks import no_live_hook

    hook = await store.get_hook(token)
    if hook is None:
        raise no_live_hook(token)
    try:
        ended = (await store.get_run(hook.run_id)).status.is_terminal
    except RunNotFound:
        ended = True  # deleted, its hook not swept yet: no run waits on it
    if ended:
        raise no_live_hook(token) from None
    return hook


async def check_stream(store: Store, run_id: str, name: str, *, follow: bool = True) -> None:
    """Raise now what ``follow_stream`` would raise before its first chunk, without waiting:
    ``wf.RunNotFound`` / ``wf.ResultExpired``, and ``wf.StreamNotFound`` (naming the run's
    streams) for a stream the run has not, unless ``follow`` and the run may still open it.
    ``GET /api/v1/runs/{id}/streams/{name}`` checks here, before its body begins, to answer
    with the error rather than a body cut short."""
    from wf.admin._read import existing_run
    from wf.engine._run import find_stream, stream_not_found

    record = await existing_run(store, run_id)
    found, streams, damaged = await find_stream(store, record.id, name)
    if not found and (record.status.is_terminal or not follow):
        raise stream_not_found(record.id, name, streams, damaged)


async def stream_start(store: Store, run_id: str, name: str, start: int) -> int:
    """The number of the first chunk ``follow_stream`` gives from ``start`` < 0 (from the
    end): the last ``-start`` chunks there are now. On a stream not written yet (or not open
    yet) there are none: 0, every chunk written from now on."""
    count = (await store.stream_info(run_id, name))[0]
    return max(0, count + start)


async def follow_stream(
    store: Store, run_id: str, name: str = "default", start: int = 0, *, follow: bool = True
) -> AsyncIterator[bytes]:
    """The chunks of byte stream ``name`` of a run from ``start`` (negative: from the end);
    with ``follow``, new ones as they are written until the stream closes or the run ends.

    Raises ``wf.RunNotFound`` (before yielding anything) for an unknown run,
    ``wf.ResultExpired`` for a deleted one, and ``wf.StreamNotFound`` (naming the run's
    streams) for a stream the run does not have — without ``follow``, or once the run has
    ended without creating it (a run that is not finished, suspended ones included, may still
    open it: it is waited for). A stream that
    ended with the step writing it cut off raises ``wf.StreamIncomplete`` after its last chunk
    (``run.read_stream`` does the same).
    """
    from wf.admin._read import existing_run
    from wf.engine._run import check_complete, start_now, wait_for_stream

    run_id = validate_run_id(run_id)
    await existing_run(store, run_id)
    start = await start_now(store, run_id, name, start)
    await wait_for_stream(store, run_id, name, follow=follow)
    async for chunk in store.stream_chunks(run_id, name, start, follow=follow, poll=2.0):
        yield chunk
    await check_complete(store, run_id, name)


async def watch(store: Store, run_id: str) -> AsyncIterator[RunEvent]:
    """The run's events (``wf.RunEvent``) as they happen, until the terminal one (``wf.Run.
    watch``); ``wf.RunNotFound`` for an unknown run and ``wf.ResultExpired`` for a deleted
    one, before anything is yielded, as ``GET /api/v1/events?run=ID`` answers."""
    from wf.admin._read import existing_run
    from wf.engine._watch import watch as watch_run

    record = await existing_run(store, run_id)
    async for event in watch_run(store, record.id):
        yield event
