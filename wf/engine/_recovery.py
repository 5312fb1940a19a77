"""Counting the drivers that died in a run: ``max_recoveries`` and ``wf.RunStalled``.

A driver's death leaves nothing of its own in the journal, so each drive makes its marker
(``run_attempt``/``run_resumed``) outlive the process before the workflow's code runs, and
the start of its first live step before that step's code runs (``_step``): a process that
dies in the step leaves a ``step_started`` that nothing completed, and one that dies in the
workflow's own code leaves a marker that nothing follows. The next driver reads the journal's
tail since the last event that records progress (anything but the drive markers and
``step_started``): each drive in that tail that left no trace of finishing is one death in a
row. A run that records progress between crashes has a fresh tail, so it is never counted as
stalled.

A drive the store stopped (a full disk: a ``wf.StoreError`` on one of its writes) leaves the
same tail, but no process died: its driver notes it (``drive_failed``, naming where that drive
began), and the drive so named is no death (nor progress: the deaths around it still add up).
A store that failed a write may fail the note too; the process then remembers the drive
(``DriveGate.failed``) and its next drive of the run writes the note before its marker. A
process that never drives the run again (``wf worker --until-idle`` on a disk that stays full)
leaves it unnoted: the next process counts it, as it counts a death. The note names the drive
by position, so a note written late never excuses a drive of another process that died since.

A drive its process ended on purpose (its task cancelled: Ctrl-C or SIGTERM of ``wf run``, a
program that returns while its run is in a step) is no death either: it writes the same note,
marked ``reason: "interrupted"``, before the process goes on ending (``_driver``), or none if
the store does not take it in time (then it counts). A crash runs no code: it always counts.

The count is the journal's own (nothing else is written to keep it), so a crash between a
recovery and its counting cannot lose it; the ``run_resumed`` event of a recovery repeats it
(``recoveries``, ``steps``) for readers (``wf inspect``, the web UI).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from wf.store import Event

DEFAULT_MAX_RECOVERIES = 10
"""Deaths in a row, without progress, after which a run fails with ``wf.RunStalled``."""

_MARKERS = frozenset({"run_resumed", "run_attempt"})
"""Events a driver writes as it begins a drive: not progress."""


@dataclasses.dataclass(frozen=True)
class Recoveries:
    """The drivers that died in a row, without progress, in the steps they died in."""

    steps: tuple[tuple[dict[str, Any], ...], ...]
    """One entry per death, oldest first: the steps (``op``, ``name``) it was in."""

    @property
    def count(self) -> int:
        return len(self.steps)

    def first(self, count: int) -> Recoveries:
        """The first ``count`` deaths only (the later ones were no deaths: ``DriveGate.cut``)."""
        return self if count >= self.count else Recoveries(self.steps[: max(0, count)])

    def named_steps(self) -> list[dict[str, Any]]:
        """Each death's steps, in order, as ``wf.RunStalled`` names them."""
        return [step for death in self.steps for step in death]


def recoveries(journal: Sequence[Event]) -> Recoveries:
    """The deaths in a row at the end of ``journal`` (none if its last drive did not die).

    A drive begins at its marker (the first drive of a run started at once has none: it
    begins after ``run_started``). One that left only started steps after it died in them;
    one that left nothing after its marker died in the workflow's own code (or replaying).
    """
    deaths: list[tuple[dict[str, Any], ...]] = []
    open_steps: dict[int, dict[str, Any]] = {}
    later: Event | None = None
    """The marker of the drive after the one being read."""
    failed: set[tuple[int, str | None]] = set()
    """The drives the store stopped (``drive_failed``): where each began, and the token its
    markers carry (none for a drive without a marker, and in journals written before wf
    wrote tokens): no deaths. A note written late names a position that another process's
    marker may have taken meanwhile: its token is not the note's, its death still counts."""
    for position in range(len(journal) - 1, -1, -1):
        event = journal[position]
        kind = event.get("type")
        if kind == "step_started":
            op = event.get("op")
            if isinstance(op, int):
                open_steps.setdefault(op, {"op": op, "name": event.get("name")})
            continue
        if kind == "drive_failed":
            began = event.get("began")
            drive = event.get("drive")
            if isinstance(began, int):
                failed.add((began, drive if isinstance(drive, str) else None))
            continue
        if kind not in _MARKERS and kind != "run_started":
            # Progress (or a suspension, a retry): a drive that recorded some and then died
            # is not a death "without progress", and nothing before it counts.
            break
        if (_began(event, position), _token(event)) in failed:
            pass  # the store stopped that drive: no process died (nor made progress)
        elif open_steps:
            deaths.append(tuple(sorted(open_steps.values(), key=lambda s: s["op"])))
        elif kind in _MARKERS and not _one_drive(event, later):
            deaths.append(())
        open_steps = {}
        later = event
        if kind == "run_started":
            break
    return Recoveries(tuple(reversed(deaths)))


def _began(event: Event, position: int) -> int:
    """Where the drive that ``event`` (at ``position``) begins, or ends the tail before,
    began: at its first marker (``run_resumed`` marked ``same_drive`` follows its drive's
    ``run_attempt``); after ``run_started`` for the run's first drive, which has no marker."""
    if event.get("type") == "run_started":
        return position + 1
    if event.get("type") == "run_resumed" and event.get("same_drive") is True:
        return position - 1
    return position


def _token(event: Event) -> str | None:
    """The token of the drive that ``event`` begins or ends the tail before: its markers'
    (``drive``); none for the run's first drive without a marker (after ``run_started``)."""
    drive = event.get("drive") if event.get("type") in _MARKERS else None
    return drive if isinstance(drive, str) else None


def _one_drive(marker: Event, later: Event | None) -> bool:
    """Whether ``later`` is the second marker of ``marker``'s own drive: an attempt that
    begins as a recovery writes ``run_attempt``, then ``run_resumed`` marked ``same_drive``."""
    return (
        marker.get("type") == "run_attempt"
        and later is not None
        and later.get("type") == "run_resumed"
        and later.get("same_drive") is True
    )


def history(journal: Sequence[Event]) -> list[dict[str, Any]]:
    """Every recovery from a dead driver the journal records, oldest first, for readers:
    ``ts``, ``in_a_row`` (deaths in a row without progress by then), ``steps`` (the steps the
    last of them died in) and ``stalled`` (True for the deaths that failed the run)."""
    out: list[dict[str, Any]] = [
        {
            "ts": event.get("ts"),
            "in_a_row": event["recoveries"],
            "steps": event.get("steps") or [],
            "stalled": False,
        }
        for event in journal
        if event.get("type") == "run_resumed" and event.get("recoveries")
    ]
    if journal and journal[-1].get("type") == "run_failed":
        error = journal[-1].get("error") or {}
        dead = recoveries(journal[:-1])
        if error.get("type") == "wf.RunStalled" and dead.count:
            out.append(
                {
                    "ts": journal[-1].get("ts"),
                    "in_a_row": dead.count,
                    "steps": list(dead.steps[-1]),
                    "stalled": True,
                }
            )
    return out
