"""The wake-up invariant, checked from the outside: *no run is suspended while what it waits for
is already in the store*.

The driver makes it hold by construction (a suspension re-checks what it waits on after the
workflow has unwound, and a message taken in meanwhile makes the run due at once; see
``RunContext.unmet``). This module is the observable side: ``stuck_runs`` reads the store alone
— records, inboxes, journals, the queue — and names every suspended run that violates it, with
the reason. A worker runs it at start and periodically and makes each one due (``repair``),
logging a warning: a repair is a bug report, not a routine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from wf import _events
from wf._exceptions import RunNotFound, StoreError
from wf.engine._aside import drive_aside
from wf.store import RunRecord, RunStatus
from wf.store._base import Pages

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

log = logging.getLogger("wf.worker")

_PAGE = 500
_PAUSE = 0.01
"""Seconds of real time between two pages of suspended runs."""
_MESSAGE = "a message waits in its inbox"

CHECKED_RUN = "run (wake-up check)"
"""The kind of fault a run the check cannot make sense of is noted as: not ``run``, which a
worker no longer drives; the run's own driver judges whether it can be driven."""


@dataclasses.dataclass(frozen=True)
class Stuck:
    """A suspended run that should be due: its id and why."""

    run_id: str
    reason: str
    child: RunRecord | None = None
    """A finished child whose outcome never reached the run (its message is to be posted)."""


async def stuck_runs(
    engine: EngineLike, *, limit: int = 100_000, leased: set[str] | None = None
) -> list[Stuck]:
    """Suspended runs (at most ``limit`` looked at) that are not due although what they wait
    for is already in the store: a message in the inbox, an expired timer, a finished child, a
    payload not taken by the hook's waiting ``next()``, a cancellation not delivered.

    Suspects are looked at again under their lease; ``leased`` collects their ids (a driver
    that found one of them taken meanwhile should try again, not take it for driven elsewhere).
    """
    store = engine.store
    found: list[Stuck] = []
    pages = Pages()
    seen = 0
    while seen < limit:
        page = await store.list_runs(
            statuses=[RunStatus.SUSPENDED], limit=_PAGE, before=pages.before
        )
        if not pages.take(page):
            break
        for record in page:
            if record.id in engine.drivers:
                continue  # driven here right now
            reason = None
            try:
                # A run the check cannot make sense of is noted once and skipped.
                with store.faults.contain(CHECKED_RUN, record.id, store.run_location(record.id)):
                    reason = await _violation(engine, record)
            except (RunNotFound, StoreError):
                continue  # deleted or unreadable meanwhile: not this check's business
            if reason is not None:
                found.append(reason)
        seen += len(page)
        if len(page) < _PAGE:
            break
        await asyncio.sleep(_PAUSE)  # paced: deliveries go on between pages
    if not found:
        return found
    # Due-ness after the inbox: a post writes its message and then makes the run due, so
    # reading the queue last never flags a post caught halfway.
    now = engine.clock.now()
    due = set(await store.due_runs(now, limit=seen + len(engine.drivers) + 1000))
    confirmed = []
    for suspect in found:
        if suspect.run_id in due and suspect.child is None:
            continue  # due: a driver takes it in
        if suspect.child is not None and await _announcing(engine, suspect.child.id, due):
            continue
        # A driver taking in a message holds the lease while the record still says suspended:
        # look again under the lease, where nobody else writes.
        if leased is not None:
            leased.add(suspect.run_id)
        lease = await store.try_acquire(suspect.run_id)
        if lease is None:
            continue
        try:
            record, _ = await lease.read_run(store)
            again = None
            if record.status is RunStatus.SUSPENDED:
                with store.faults.contain(CHECKED_RUN, record.id, store.run_location(record.id)):
                    again = await _violation(engine, record)
        except (RunNotFound, StoreError):
            again = None
        finally:
            await lease.release()
        # Due by now (a post landed meanwhile): a driver takes it in, nothing to repair.
        if again is not None and again.child is None and await _becomes_due(engine, again, seen):
            continue
        if again is not None:
            confirmed.append(again)
    return confirmed


POST_SETTLE = 2.0
"""Seconds of real time a run whose inbox holds a message is given to become due before it is
repaired when no post to it is under way in this process (``Store.posting``): a post makes its
message durable (and visible) before it makes the run due, each step flushed, and a post of
another process cannot be seen halfway but by waiting for it."""


async def _becomes_due(engine: EngineLike, suspect: Stuck, seen: int) -> bool:
    """Whether the suspect is due now or, held by a message, will be: a post to it is under
    way here, or it becomes due within ``POST_SETTLE`` seconds (a post of another process),
    or its inbox empties (a driver took the message in, or a post whose flush failed withdrew
    it)."""
    loop = asyncio.get_running_loop()
    held = suspect.reason == _MESSAGE
    give_up = loop.time() + (POST_SETTLE if held else 0.0)
    while True:
        if held and engine.store.posting(suspect.run_id):
            return True  # the post makes it due once its flush is over, or withdraws it
        now = engine.clock.now()
        limit = seen + len(engine.drivers) + 1000
        if suspect.run_id in await engine.store.due_runs(now, limit=limit):
            return True
        if held:
            try:
                if not await engine.store.read_inbox(suspect.run_id):
                    return True
            except (RunNotFound, StoreError):
                return True  # deleted or unreadable meanwhile: not this check's business
        if loop.time() >= give_up:
            return False
        await asyncio.sleep(0.05)


async def _announcing(engine: EngineLike, child_id: str, due: set[str]) -> bool:
    """Whether a child that reads as ended may still be telling its parent.

    A child's driver records the outcome in the journal, then posts it to the parent, then
    saves the record; a store that derives records from the journal (the local store) shows the
    child ended from the first of these. Until its driver lets go of the lease the child is
    announcing; a driver that died before the post left the child due (its record was never
    saved), and the next driver posts it. Neither is a lost outcome."""
    if child_id in due or child_id in engine.drivers:
        return True
    lease = await engine.store.try_acquire(child_id)
    if lease is None:
        return True
    await lease.release()
    return False


async def _violation(engine: EngineLike, record: RunRecord) -> Stuck | None:
    store = engine.store
    now = engine.clock.now()
    run_id = record.id
    if _events.is_evicted(record.waiting_for):
        return None  # due at once by design (wake_at is now)
    if await store.read_inbox(run_id):
        return Stuck(run_id, _MESSAGE)
    if record.wake_at is not None and record.wake_at <= now:
        return Stuck(run_id, "its timer expired")
    waits = _events.read_waiting(record.waiting_for) or []
    kinds = {w["kind"] for w in waits}
    journal: list[dict[str, Any]] | None = None
    if kinds & {"child", "hook"} or record.cancel_requested:
        journal = await store.read_journal(run_id)
    if journal is not None and _undelivered_cancel(journal):
        return Stuck(run_id, "a cancellation was taken in but not delivered")
    for wait in waits:
        if wait["kind"] == "child" and wait["target"] and journal is not None:
            if wait["target"] in _taken_in_children(journal):
                return Stuck(run_id, f"child run {wait['target']} ended and was taken in")
            try:
                child = await store.get_run(wait["target"])
            except RunNotFound:
                continue
            if child.status.is_terminal:
                return Stuck(run_id, f"child run {wait['target']} ended unannounced", child)
        elif (
            wait["kind"] == "hook"
            and wait["target"]
            and journal is not None
            and _payload_waiting(journal, wait["target"])
        ):
            return Stuck(run_id, f"hook {wait['target']!r} has a payload not taken")
    return None


def _undelivered_cancel(journal: list[dict[str, Any]]) -> bool:
    requested = delivered = -1
    for position, event in enumerate(journal):
        if event.get("type") == "cancel_requested":
            requested = position
        elif event.get("type") == "cancel_delivered" and event.get("scope") is None:
            delivered = position
    return requested > delivered


def _payload_waiting(journal: list[dict[str, Any]], token: str) -> bool:
    """Whether the hook has more payloads than its ``next()`` calls took (the last call is the
    one waiting: each earlier call took one)."""
    ops = {
        e.get("op") for e in journal if e.get("type") == "hook_created" and e.get("token") == token
    }
    payloads = sum(1 for e in journal if e.get("type") == "hook_payload" and e.get("hook") in ops)
    # A payload next() refused is no payload waiting: the call that refused it waits on.
    payloads -= sum(
        1 for e in journal if e.get("type") == "hook_payload_refused" and e.get("hook") in ops
    )
    nexts = sum(1 for e in journal if e.get("type") == "hook_waiting" and e.get("hook") in ops)
    return nexts > 0 and payloads >= nexts


async def repair(engine: EngineLike, stuck: Stuck) -> None:
    """Make a stuck run due: post a finished child's lost outcome, then drive it here (its
    driver takes in what waits and moves on; another process holding it does the same)."""
    log.warning(
        "run %s was suspended although %s: made due (this is a bug in wf; please report it)",
        stuck.run_id,
        stuck.reason,
    )
    if stuck.child is not None:
        child = stuck.child
        data = {
            "child": child.id,
            "workflow": child.workflow,
            "status": child.status.value,
            "output": child.output,
            "error": child.error,
            "at": child.updated_at,
        }
        await engine.store.post(stuck.run_id, "child_done", data)
    drive_aside(engine, stuck.run_id)


def _taken_in_children(journal: list[dict[str, Any]]) -> set[str]:
    """Children whose outcome the current attempt has taken in (a new attempt forgets the
    failures of earlier ones: it awaits those children again, see ``RunContext``)."""
    found: dict[str, str] = {}
    for event in journal:
        if event.get("type") == "run_retrying":
            found = {c: s for c, s in found.items() if s != "failed"}
        elif event.get("type") == "child_finished":
            found[event.get("child", "")] = event.get("status", "")
    return set(found)
