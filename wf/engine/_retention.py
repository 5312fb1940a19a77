"""Retention: which finished runs may be deleted, and deleting them in small batches.

The policy: a finished run is kept for its own retention (``@wf.workflow(retention=...)``,
recorded on the run when it started), else for the store-wide one (``wf.configure``,
``WF_RETENTION``, ``[tool.wf] retention``), counted from the moment it ended; with neither it
is kept forever. A workflow declared with ``retention=None`` keeps its runs forever whatever the
store-wide setting (its runs record ``KEEP_FOREVER``). A retention under one second (0
included) is refused where it is given (``parse_retention``). ``wf gc --older-than`` replaces
the policy for one sweep.

Never deleted, whatever the policy: a run that is pending, running or suspended; a child run
whose parent is still live (the parent will read its outcome); a run with a live child (the
child will report to it). The store re-checks that a run is finished and undriven as it
deletes it, so a sweep racing a ``wf retry`` never deletes a live run.

``sweep`` pages through finished runs ``page`` at a time and deletes each page's expired runs in
one ``delete_runs`` call, yielding to the event loop between pages: a worker applying retention
in the background never stalls its deliveries for longer than one page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from wf._exceptions import RunNotFound, UsageError
from wf.store import Fault, RunRecord, RunStatus
from wf.store._base import Pages

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
LIVE = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUSPENDED)

TOMBSTONE_DAYS = 30
"""``wf gc`` removes the tombstones of runs deleted longer ago than this many days."""

KEEP_FOREVER = -1.0
"""A run's recorded retention when its workflow keeps its runs forever (``retention=None``),
whatever the store-wide setting. Negative, because records are JSON (no infinity) and no real
retention is negative."""


def recorded_retention(retention: float | None) -> float | None:
    """What a run records of its workflow's retention (``Workflow.retention``): seconds, None
    (the store-wide setting decides) or ``KEEP_FOREVER`` (for an infinite retention)."""
    if retention is not None and math.isinf(retention):
        return KEEP_FOREVER
    return retention


def own_retention(record: RunRecord) -> bool:
    """Whether a run carries a retention of its own that may delete it some day."""
    return record.retention is not None and record.retention >= 0


@dataclasses.dataclass
class Sweep:
    """What one sweep did (or, with ``dry_run``, would do)."""

    deleted: list[str] = dataclasses.field(default_factory=list)
    bytes: int = 0
    scanned: int = 0
    kept_for_family: int = 0
    """Expired runs kept because a parent or child of theirs is still live."""
    dry_run: bool = False
    tombstones_pruned: int = 0
    """Tombstones removed (``prune_tombstones``: runs deleted over ``TOMBSTONE_DAYS`` ago)."""
    saw_own_retention: bool = False
    """Whether any scanned run carries a retention of its own (workers use it to decide whether
    sweeping is worth it)."""
    compacted: int = 0
    """Finished runs ``wf gc`` had the store compact (``Store.compact``) after the sweep."""
    compact_failed: str | None = None
    """Why compacting after the sweep failed (``wf gc`` says it as a warning; the sweep's
    deletions stand), or None."""
    damaged: list[Fault] = dataclasses.field(default_factory=list)
    """Runs the sweep left alone because they cannot be read (``wf.store.Fault``), when its
    caller collects them to name (``wf.admin``'s ``gc``: ``wf gc`` says each on stderr)."""

    def to_json(self) -> dict[str, object]:
        """As a JSON object (``wf gc --json``)."""
        return {
            "deleted": len(self.deleted),
            "bytes": self.bytes,
            "scanned": self.scanned,
            "kept_for_family": self.kept_for_family,
            "tombstones_pruned": self.tombstones_pruned,
            "dry_run": self.dry_run,
            "compacted": self.compacted,
            "compact_failed": self.compact_failed,
            "runs": self.deleted,
            "damaged": [fault.to_json() for fault in self.damaged],
        }


def expired(
    record: RunRecord, now: float, default: float | None, older_than: float | None = None
) -> bool:
    """Whether the policy lets ``record`` go at ``now`` (finished, and kept long enough)."""
    if not record.status.is_terminal:
        return False
    keep = older_than
    if keep is None:
        keep = record.retention if record.retention is not None else default
    if keep is None or keep < 0:
        return False  # no retention anywhere, or the run is kept forever
    return record.updated_at + keep <= now


async def _verdict(
    engine: EngineLike, record: RunRecord, now: float, older_than: float | None
) -> str | None:
    """``"delete"``, ``"family"`` (expired, kept for a live parent or child) or None (kept)."""
    if not expired(record, now, engine.retention, older_than):
        return None
    return "family" if await _family_live(engine, record) else "delete"


async def _family_live(engine: EngineLike, record: RunRecord) -> bool:
    store = engine.store
    if record.parent_id is not None:
        try:
            parent = await store.get_run(record.parent_id)
        except RunNotFound:
            parent = None
        if parent is not None and not parent.status.is_terminal:
            return True
    children = await store.list_runs(parent_id=record.id, statuses=list(LIVE), limit=1)
    return bool(children)


def check_statuses(statuses: Sequence[str] | None) -> list[RunStatus]:
    """The statuses a sweep may look at: finished ones only (``UsageError`` otherwise)."""
    if not statuses:
        return list(FINISHED)
    out = []
    for value in statuses:
        try:
            status = RunStatus(value)
        except ValueError:
            raise UsageError(f"status: {value!r} is not a run status") from None
        if not status.is_terminal:
            raise UsageError(
                f"status: {value!r} runs are never deleted (only completed, failed, cancelled)"
            )
        out.append(status)
    return out


async def sweep(
    engine: EngineLike,
    *,
    older_than: float | None = None,
    workflow: str | None = None,
    statuses: Sequence[str] | None = None,
    dry_run: bool = False,
    page: int = 200,
    pause: float = 0.0,
    limit: int | None = None,
    on_progress: Callable[[int], object] | None = None,
) -> Sweep:
    """Delete (or list, with ``dry_run``) every finished run the policy lets go.

    ``older_than`` replaces the policy (seconds since the run ended); ``workflow`` and
    ``statuses`` narrow the sweep; ``limit`` stops after that many deletions. ``pause`` seconds
    of real time pass between pages (a worker's background sweep leaves room for deliveries).
    ``on_progress(scanned)`` is called after each page.
    """
    wanted = check_statuses(statuses)
    reason = "retention" if older_than is None else "gc"
    out = Sweep(dry_run=dry_run)
    store = engine.store
    pages = Pages()
    while limit is None or len(out.deleted) < limit:
        records = await store.list_runs(
            statuses=wanted, workflow=workflow, limit=page, before=pages.before
        )
        if not pages.take(records):
            break
        now = engine.clock.now()
        doomed: list[str] = []
        for record in records:
            out.scanned += 1
            if own_retention(record):
                out.saw_own_retention = True
            # A run whose record cannot be judged (a damaged field) is kept and noted once.
            verdict = None
            with store.faults.contain("finished run", record.id, store.run_location(record.id)):
                verdict = await _verdict(engine, record, now, older_than)
            if verdict is None:
                continue
            if verdict == "family":
                out.kept_for_family += 1
                continue
            doomed.append(record.id)
            if limit is not None and len(out.deleted) + len(doomed) >= limit:
                break
        if doomed:
            if dry_run:
                out.deleted.extend(doomed)
            else:
                done = await store.delete_runs(doomed, now=now, reason=reason)
                out.deleted.extend(done.ids)
                out.bytes += done.bytes
        if on_progress is not None:
            on_progress(out.scanned)
        await asyncio.sleep(pause)
    return out


async def prune_tombstones(engine: EngineLike) -> int:
    """Remove the tombstones of runs deleted over ``TOMBSTONE_DAYS`` days ago."""
    return await engine.store.prune_tombstones(engine.clock.now() - TOMBSTONE_DAYS * 86400)
