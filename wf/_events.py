"""The journal schema: every kind of event a run's journal holds, declared once.

Each ``EventKind`` names its fields, the operation it opens (its ``op`` is the id of an operation
of that kind, checked against the code on replay), and the run status it records if it is an
outcome. Every table of event names elsewhere — the events that open an operation, the outcomes,
the fields replay requires, the rows ``wf inspect`` shows — is derived from ``KINDS``, so adding
an event kind is one declaration here.

It sits below the engine, the stores and the command line, and imports nothing from them.

Also here: the structured form of what a suspended run waits for (``Waiting``), stored in the
record's and the ``run_suspended`` event's ``waiting_for`` as a list of them. Only the command
line, the TUI and the docs turn it into words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict


@dataclasses.dataclass(frozen=True)
class EventKind:
    """One kind of journal event. Every event also has ``type`` (its kind) and ``ts``."""

    name: str
    fields: tuple[str, ...]
    """Fields every event of this kind has (replay and readers rely on them)."""
    optional: tuple[str, ...] = ()
    """Fields it may have."""
    opens: str | None = None
    """The operation kind whose id is in ``op``: the event opens (or continues) that operation."""
    outcome: str | None = None
    """The run status it records when it is the run's outcome (always the last event)."""
    doc: str = ""


KINDS: dict[str, EventKind] = {
    kind.name: kind
    for kind in (
        # -- the run ----------------------------------------------------------------------
        EventKind(
            "run_started",
            ("workflow", "input"),
            ("record",),
            doc="The first event: the workflow, its encoded input and the record as created.",
        ),
        EventKind(
            "run_resumed",
            ("resumes",),
            ("recoveries", "steps", "same_drive", "drive"),
            doc="A driver resumed the run (a replay). After drivers died in it: ``recoveries``, "
            "how many in a row without progress, and ``steps``, the steps (``op``, ``name``) "
            "the last one died in. ``drive``: the drive's token (in each of its markers), "
            "which its ``drive_failed`` repeats.",
        ),
        EventKind(
            "run_attempt",
            ("attempt",),
            ("drive",),
            doc="An attempt of a queued run begins (the first, or a run-level retry). ``drive``: "
            "the drive's token, as in ``run_resumed``.",
        ),
        EventKind(
            "drive_failed",
            ("began", "error"),
            ("drive", "reason"),
            doc="A drive stopped because the store failed to record one of its writes (a full "
            "disk, an I/O error: ``error``, in words), or, with ``reason`` ``interrupted``, "
            "because its process ended it on purpose (Ctrl-C or SIGTERM of ``wf run``, a "
            "program that returned while its run was in a step): no process died. ``began``: "
            "the journal "
            "position of that drive's first event (its marker), and ``drive``: the token its "
            "markers carry (absent for a drive without a marker), the drive this names; deaths "
            "in a row (``max_recoveries``) do not count it, and only a drive whose marker at "
            "``began`` carries that token is it (a late note cannot name another process's "
            "drive whose marker took that position). Written right after the failure, or, when "
            "the store could not take it then, by the process's next drive of the run; an "
            "interruption's, before its process ends, or not at all (it then counts as a "
            "death).",
        ),
        EventKind(
            "run_retrying",
            ("attempt", "max_attempts", "error", "retry_at"),
            ("manual",),
            doc="A failed attempt; the run is pending again, due at ``retry_at``.",
        ),
        EventKind(
            "run_suspended",
            ("wake_at", "waiting_for"),
            doc="The run let go of its process: when it is due (``wake_at``) and what it waits "
            "for (a list of ``Waiting``; a sentence in journals written before 0.12).",
        ),
        EventKind("run_completed", ("output",), outcome="completed", doc="The run's output."),
        EventKind(
            "run_failed",
            ("error",),
            ("rollback_errors",),
            outcome="failed",
            doc="The run's error.",
        ),
        EventKind(
            "run_cancelled",
            (),
            ("error", "rollback_errors"),
            outcome="cancelled",
            doc="The run was cancelled.",
        ),
        # -- steps ------------------------------------------------------------------------
        EventKind("step_started", ("op", "name"), ("attempt", "args"), opens="step"),
        EventKind("step_completed", ("op", "name", "result"), ("attempt",), opens="step"),
        EventKind(
            "step_retrying",
            ("op", "name", "retry_at"),
            ("attempt", "max_attempts", "error"),
            opens="step",
        ),
        EventKind("step_failed", ("op", "name", "error"), ("attempt",), opens="step"),
        # -- time, values, versions ---------------------------------------------------------
        EventKind("sleep_started", ("op", "name", "until"), opens="sleep"),
        EventKind("value_recorded", ("op", "name", "value"), opens="value"),
        EventKind("patch_recorded", ("op", "name"), ("applied",), opens="patch"),
        EventKind(
            "progress",
            ("data",),
            ("op", "name", "step"),
            opens="progress",
            doc="``wf.progress(data)``: from the workflow (an operation, ``op``) or from a step "
            "(``step``: its op; no operation of its own).",
        ),
        # -- hooks ------------------------------------------------------------------------
        EventKind("hook_created", ("op", "name", "token"), opens="hook"),
        EventKind("hook_waiting", ("op", "name", "hook"), opens="hook_next"),
        EventKind("hook_conflict_checked", ("op", "name"), ("owner",), opens="hook_conflict"),
        EventKind("hook_disposed", ("op", "name", "hook"), opens="hook_dispose"),
        EventKind(
            "hook_payload",
            ("hook", "payload"),
            ("token", "message", "at"),
            doc="A payload taken in from the inbox; ``at``: when it reached the store.",
        ),
        EventKind(
            "hook_payload_refused",
            ("hook", "index", "error"),
            ("token",),
            doc="``next()`` refused the hook's payload ``index`` (0-based, among its "
            "``hook_payload`` events): it does not fit the hook's type (``error``) and never "
            "reaches the workflow.",
        ),
        # -- child runs -------------------------------------------------------------------
        EventKind(
            "child_started",
            ("op", "name", "child"),
            ("adopted",),
            opens="child",
            doc="``adopted``: the child (an explicit ``run_id``) existed already, started by "
            "another run or from outside; this run asked it to tell it its outcome too.",
        ),
        EventKind(
            "child_waiter",
            ("parent",),
            ("message",),
            doc="In a child's journal: another run (``parent``) that awaits this run's outcome "
            "(it started a child with this run's id when the run existed); told when it ends.",
        ),
        EventKind(
            "child_finished",
            ("child", "status"),
            ("name", "output", "error", "message", "at"),
            doc="A child's outcome taken in from the inbox; ``at``: when the child ended.",
        ),
        # -- composition ------------------------------------------------------------------
        EventKind(
            "select_decided",
            ("op", "name", "index"),
            ("cancelled", "lost_ops"),
            opens="select",
            doc="Which candidate won (``index``); ``cancelled``: the operations of the steps "
            "still running that the decision cancelled (absent when there were none); "
            "``lost_ops``: the op ids the losing helper-coroutine candidates took, which a "
            "replay (running only the winner) gives to no operation (absent when none).",
        ),
        EventKind(
            "timeout_started",
            ("op", "name", "until"),
            ("end_journaled",),
            opens="timeout",
            doc="A ``wf.timeout`` / ``wf.deadline`` block was entered; ``until``: its deadline. "
            "``end_journaled``: its end is journaled either way (``timeout_ended``, or a "
            "``cancel_delivered`` at ``exit``); absent in journals of a wf before "
            "``timeout_ended``, whose replays decide an end it did not journal from the "
            "recorded ends of the block's operations.",
        ),
        EventKind(
            "timeout_ended",
            ("op", "name"),
            opens="timeout",
            doc="The block of timeout ``op`` ended in time (no ``TimeoutError``): written with "
            "the run's next write (no flush of its own), so every later drive decides the "
            "block's end as the drive that reached it did.",
        ),
        EventKind("rollback_registered", ("op", "name"), opens="rollback"),
        # -- requests from outside, and their delivery --------------------------------------
        EventKind("cancel_requested", (), ("message",), doc="A cancellation taken in."),
        EventKind(
            "cancel_delivered",
            ("op", "at"),
            ("scope",),
            doc="Where a cancellation (of the run, or a timeout's scope) reached the code: at "
            "the call of operation ``op`` or while it waited (``at``), or, for a timeout whose "
            "block ended after its deadline with no operation left to stop, at the block's "
            "end (``at: exit``, ``op``: the timeout's). ``op`` does not open it.",
        ),
        EventKind("wake_requested", (), ("message",), doc="A wake request taken in."),
        # -- streams ----------------------------------------------------------------------
        EventKind(
            "stream_write",
            ("step", "stream", "index"),
            ("attempt", "run_attempt"),
            doc="A step wrote chunk ``index`` of a byte stream (journaled before the chunk); "
            "``attempt``/``run_attempt``: the step's and the run's attempt that wrote it (a "
            "crash re-runs the same attempt, which maps its writes onto these chunks).",
        ),
        EventKind(
            "stream_closed",
            ("step", "stream"),
            ("attempt", "run_attempt"),
            doc="A step's writer closed a byte stream (journaled before the close): later "
            "attempts of the run's attempt ``run_attempt`` may add no chunk to it.",
        ),
    )
}

OPENING_EVENTS: dict[str, str] = {k.name: k.opens for k in KINDS.values() if k.opens}
"""Event kind -> the operation kind it records."""

OPERATION_KINDS: frozenset[str] = frozenset(OPENING_EVENTS.values())
"""Every kind of durable operation a workflow performs."""

OUTCOME_EVENTS: dict[str, str] = {k.name: k.outcome for k in KINDS.values() if k.outcome}
"""Outcome event kind -> the run status (its value) it records."""

REQUIRED: dict[str, tuple[str, ...]] = {k.name: k.fields for k in KINDS.values() if k.fields}
"""Event kind -> the fields an event of that kind must have (else the journal is damaged)."""

_TIMED = frozenset(name for name, kind in KINDS.items() if "until" in kind.fields)
"""The kinds whose ``until`` is a deadline (epoch seconds) replay reads."""

FIRST_EVENT = "run_started"
"""The kind of every journal's first event, and of no other."""

FOLLOWS_OUTCOME: dict[str, str] = {"run_failed": "run_retrying"}
"""Outcome kind -> the one kind that may follow it (``wf retry`` of a failed run): any other
outcome ends its journal for good."""


def event_damage(journal: Sequence[Mapping[str, Any]], position: int) -> str | None:
    """What makes event ``position`` of ``journal`` one replay cannot use, in words (``event
    <n> (<kind>) lacks 'name'``); None if it is sound.

    Damage: an event with no type, of a kind wf does not know (a stray write, or an event of a
    newer wf, which this one would replay into a wrong result), without a field its kind
    requires or with an ``op`` that is not an integer or an ``until`` that is neither a time
    nor null (no deadline: an older wf's ``wf.sleep(inf)``), a
    ``run_started`` after the first event, or an outcome that is not the journal's last event
    (but a failed run's manual retry).
    The first event being ``run_started`` is the caller's check (a journal that lost its
    start is named as such)."""
    event = journal[position]
    kind = event.get("type")
    where = f"event {position + 1}"
    if not isinstance(kind, str):
        return f"{where} has no type"
    declared = KINDS.get(kind)
    if declared is None:
        return f"{where} ({kind}) is of no kind this wf knows (damage, or a newer wf's event)"
    missing = [key for key in declared.fields if key not in event]
    if missing:
        return f"{where} ({kind}) lacks {', '.join(map(repr, missing))}"
    if "op" in declared.fields and type(event["op"]) is not int:
        return f"{where} ({kind}) has a non-integer op"
    if kind in _TIMED:
        until = event["until"]
        if type(until) is not float and type(until) is not int and until is not None:
            # A deadline replay and readers compare: never a TypeError wherever they do. None
            # is no deadline: ``wf.sleep(inf)`` and ``wf.timeout(inf)`` of a wf before they
            # refused infinity wrote it (JSON has no infinity), and replay reads it so.
            return f"{where} ({kind}) has an until that is not a time ({until!r:.40})"
    if kind == FIRST_EVENT and position > 0:
        return f"{where} ({kind}) is not the first event"
    if declared.outcome is not None and position < len(journal) - 1:
        follows = FOLLOWS_OUTCOME.get(kind)
        if follows is None or journal[position + 1].get("type") != follows:
            return f"{where} ({kind}) is not the last event (an outcome ends its journal)"
    return None


def journal_damage(journal: Sequence[Mapping[str, Any]]) -> str | None:
    """The first damaged event of ``journal`` (``event_damage``), in words; None if none is."""
    for position in range(len(journal)):
        found = event_damage(journal, position)
        if found is not None:
            return found
    return None


HOOK_EVENTS: frozenset[str] = frozenset(
    k.name for k in KINDS.values() if "hook" in k.fields and k.name != "hook_created"
)
"""Events about a hook: ``hook`` holds the hook's operation id (their ``op``, if any, is the id
of the ``next()`` / ``dispose()`` call)."""


# -- what a suspended run waits for -----------------------------------------------------------

WaitKind = Literal["sleep", "retry", "timeout", "hook", "child", "resume", "text"]


class Waiting(TypedDict):
    """One thing a suspended run waits for.

    ``kind``: ``sleep`` (a timer), ``retry`` (a step's next attempt; ``target`` its name),
    ``timeout`` (a ``wf.timeout`` deadline), ``hook`` (``target``: its token), ``child``
    (``target``: the child's run id), ``resume`` (its driver stopped: due at once), or ``text``
    (an older wf's sentence, in ``target``). ``until``: the time it ends by itself, if any.
    """

    kind: WaitKind
    target: str | None
    until: float | None


def waiting(kind: WaitKind, target: str | None = None, until: float | None = None) -> Waiting:
    """A ``Waiting``."""
    return {"kind": kind, "target": target, "until": until}


def read_waiting(value: Any) -> list[Waiting] | None:
    """``waiting_for`` as stored, in its structured form; an older wf's sentence becomes one
    ``text`` entry (never parsed back)."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        return [waiting("text", value)]
    out: list[Waiting] = []
    if isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and isinstance(item.get("kind"), str):
                until = item.get("until")
                target = item.get("target")
                out.append(
                    {
                        "kind": item["kind"],
                        "target": None if target is None else str(target),
                        "until": float(until) if isinstance(until, int | float) else None,
                    }
                )
    return out or None


def is_evicted(value: Any) -> bool:
    """Whether a run was suspended only because its driver stopped (a drain, a reload)."""
    found = read_waiting(value)
    return bool(found) and all(w["kind"] == "resume" for w in found or ())
