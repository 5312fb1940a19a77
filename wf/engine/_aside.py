"""Drives nobody awaits (a child run driven beside its parent, a parent told of its child's
end): their failure is said in one line, never left as an unretrieved task exception."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING

from wf._exceptions import LeaseLost, StoreCorrupted, StoreError, StoreUnavailable

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike
from wf.store import Lease, RunRecord

log = logging.getLogger("wf.worker")

STORE_FAILED_RETRY = 30.0
"""Seconds before a run whose drive failed in the store (a ``wf.StoreError`` other than a
dropped connection or damage) is driven here again: by the worker (``Worker``), and by a
``result()`` that drives its due descendants (``EngineLike.failed_until``)."""

FAILED_KEPT = 4096
"""Runs whose failed drive an engine remembers before it forgets the ones past their time."""


def drive_aside(
    engine: EngineLike, run_id: str, *, bounded: bool = True, lease: Lease | None = None
) -> None:
    """``engine.drive_soon(run_id)`` for a caller that does not await the drive.

    ``bounded``: a run not driven here yet is driven only while the process has room for it
    (``Engine.room_to_drive``: a worker here drives at most its concurrency at once, the runs
    it claimed and these together); otherwise it stays due, and the worker's next claim (or
    another process's) drives it when a place frees. ``lease``: the run's, taken already
    (``Engine.start``); given with ``bounded`` False only.

    A drive that fails leaves its run due, as a worker's own does: one that lost its lease or
    its connection (``wf.LeaseLost``, ``wf.StoreUnavailable``) is said in one warning, and the
    next look at the queue (this process's worker's, or any other's) drives it again; damage
    met (``wf.StoreCorrupted``) is noted with the store's other damage (``Faults.note``);
    anything else is said in one error line and leaves the run due: an error no run caused (a
    crash of the drive, a bug) must not set the run aside for good. A store failure of
    another kind (``wf.StoreError``) is remembered (``note_failed``): a ``result()`` looking
    at its descendants drives the run again only ``STORE_FAILED_RETRY`` later."""
    known = engine.drivers.get(run_id)
    if bounded and (known is None or known.done()) and not engine.room_to_drive():
        return
    task = engine.drive_soon(run_id, lease=lease)
    if task is not known:  # a drive already under way is its owner's to report
        task.add_done_callback(functools.partial(_said, engine, run_id))


def _said(engine: EngineLike, run_id: str, task: asyncio.Task[RunRecord | None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    note_failed(engine, run_id, error)
    if error is None:
        return
    if isinstance(error, LeaseLost | StoreUnavailable):
        log.warning("run %s: %s (driven again)", run_id, error)
    elif isinstance(error, StoreCorrupted):
        engine.store.faults.note("run", run_id, engine.store.run_location(run_id), error)
    else:
        log.error("run %s: %s: %s", run_id, type(error).__name__, error)


def note_failed(engine: EngineLike, run_id: str, error: BaseException | None) -> None:
    """Remember, for ``STORE_FAILED_RETRY``, that the run's drive here failed in the store
    (``EngineLike.failed_until``); a drive that ended otherwise forgets it."""
    if not isinstance(error, StoreError) or isinstance(
        error, StoreCorrupted | LeaseLost | StoreUnavailable
    ):
        engine.failed_until.pop(run_id, None)
        return
    now = engine.clock.now()
    failed = engine.failed_until
    if len(failed) >= FAILED_KEPT:
        for stale in [r for r, until in failed.items() if until <= now]:
            del failed[stale]
    failed[run_id] = now + STORE_FAILED_RETRY
