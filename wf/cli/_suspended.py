"""What ``wf run`` says while the run it drives is suspended, and when it stops waiting.

A run that sleeps or waits for a child ends its wait by itself, so ``wf run`` keeps waiting
and says that Ctrl-C leaves the run safe in the store and what finishes it then. A run that
waits only for hooks waits for the outside world, possibly for days: ``wf run`` returns (with
``--wait`` it keeps waiting) and names the command that delivers the payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wf.admin._words import clock_time, duration, outside_only, visible, waiting_text

if TYPE_CHECKING:
    from wf import RunRecord
    from wf.admin._follow import Follower
    from wf.cli._progress import Sink


def _hooks(record: RunRecord) -> list[str]:
    return [str(item["target"]) for item in record.waiting_for or [] if item["kind"] == "hook"]


def _deliver(record: RunRecord) -> str:
    return f"`wf hook resume {_hooks(record)[0]} --data JSON`"


def left_waiting(record: RunRecord, *, elsewhere: str | None = None) -> str:
    """The line ``wf run`` leaves with when it returns on a run that waits for the outside.

    ``elsewhere``: the deployment whose workers drive the run: delivering the payload does not
    finish the run then, one of those workers does."""
    finishes = (
        f"delivers it, and a worker of deployment {elsewhere} then finishes the run"
        if elsewhere is not None
        else "delivers it and finishes the run"
    )
    return (
        f"run {record.id} waits for {waiting_text(record.waiting_for)}, which only the outside "
        f"can deliver: it is safe in the store. {_deliver(record)} {finishes} "
        "(`wf run --wait` waits here instead)"
    )


def waiting_here(
    record: RunRecord, now: float, *, elsewhere: str | None = None, due: bool = False
) -> str:
    """The line ``wf run`` prints when the run it keeps waiting for suspends.

    ``elsewhere``: the deployment whose workers drive the run (not this process); ``due``:
    what it waits for is in its inbox already (said only with ``elsewhere``: here the run is
    driven at once)."""
    safe = "Ctrl-C leaves it safe in the store"
    if elsewhere is not None:
        worker = f"a worker of deployment {elsewhere}"
        if due:
            what = f"has what it waits for ({waiting_text(record.waiting_for)}) in its inbox"
            return f"run {record.id} {what}: waiting here for {worker} to drive it. {safe}"
        until = f"{_deliver(record)} delivers it and " if outside_only(record) else ""
        return (
            f"run {record.id} waits for {waiting_text(record.waiting_for) or 'its children'}: "
            f"waiting here until {until}{worker} drives it. {safe}"
        )
    if outside_only(record):
        return (
            f"run {record.id} waits for {waiting_text(record.waiting_for)}: waiting here until "
            f"{_deliver(record)} delivers it (from another terminal). {safe}; that command "
            "then finishes it"
        )
    if record.wake_at is not None:
        at = f"{clock_time(record.wake_at)} (in {duration(max(0.0, record.wake_at - now))})"
        waits = record.waiting_for or []
        if waits and all(item["kind"] == "sleep" for item in waits):
            what = f"sleeps until {at}"
        else:
            what = f"waits for {waiting_text(waits)}, due {at}"
        now_by = []  # what ends the wait now, each only where it works
        if _hooks(record):
            now_by.append(f"{_deliver(record)} delivers the hook's payload now")
        if any(item["kind"] == "sleep" for item in waits):
            now_by.append(f"`wf wake {record.id}` ends a sleep now")
        sooner = "".join(f", or {how}" for how in now_by)
        return (
            f"run {record.id} {what}: waiting here. {safe}; `wf worker` then finishes it when "
            f"it is due{sooner}"
        )
    return (
        f"run {record.id} waits for {waiting_text(record.waiting_for) or 'its children'}: "
        f"waiting here. {safe}; `wf worker` then finishes it"
    )


async def follow_run(
    follower: Follower[Sink],
    *,
    keep_waiting: bool,
    quiet: bool,
    driving: Callable[[], asyncio.Task[Any] | None] = lambda: None,
    elsewhere: str | None = None,
    poll: float = 0.5,
) -> RunRecord | None:
    """Feed the live view until the run ends (returns None) or, unless ``keep_waiting``, until
    it suspends on hooks alone (returns its record). Each suspension is explained once.

    ``driving``: the task of this process that drives the run now, if any (a suspension read
    while it lives may be one the drive is ending: its payload taken in, the run not yet saved
    as running). ``elsewhere``: the deployment whose workers drive the run, when this process
    may not (``wf run`` waits for them)."""
    import time

    from wf import RunStatus
    from wf._exceptions import StoreUnavailable

    told: Any = None
    while True:
        try:
            record = await follower.refresh()
        except StoreUnavailable:
            # The store does not answer for now: the view waits for it, as the drive does
            # (``_run._wait_quietly`` says so, and bounds the wait).
            await asyncio.sleep(poll)
            continue
        if record.status.is_terminal:
            return None
        if record.status is RunStatus.SUSPENDED:
            drive = driving()
            if drive is not None:
                # Driven here now: the suspension read may be one the drive ends (it took the
                # payload in and has not saved the run as running yet). Read again once the
                # drive ended or changed the run; leaving now would cut the drive.
                await asyncio.wait({drive}, timeout=poll)
                continue
            due = False
            if outside_only(record):
                # A payload already in its inbox ends this wait: the drive here (or the
                # run's deployment's worker) takes it next.
                try:
                    due = await follower.has_messages()
                except StoreUnavailable:
                    due = True  # asked again after the wait below
                if not due and not keep_waiting:
                    # Read again after the empty inbox: a driver elsewhere may have taken a
                    # payload in since the first read (``wf.engine._run.settled_again``).
                    with contextlib.suppress(StoreUnavailable):
                        again = await follower.refresh()
                        if outside_only(again):
                            return again
                    continue  # driven meanwhile (or the store stopped answering): read again
            key = (record.resumes, record.wake_at, repr(record.waiting_for))
            if key != told and not quiet and (elsewhere is not None or not due):
                # A due run is driven here at once: no line for a wait that is over.
                told = key
                line = waiting_here(record, time.time(), elsewhere=elsewhere, due=due)
                sys.stderr.write(f"wf: {visible(line)}\n")
                sys.stderr.flush()
        with contextlib.suppress(StoreUnavailable):
            await follower.changed(poll)
