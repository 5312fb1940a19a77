"""Why a run is where it is, in words for the run screen's header.

The reasons come from ``wf.admin.explain`` (the one explainer); this only words them, with the
screen's keys where one helps (``r`` to send a hook a payload, enter to open a child).
"""

from __future__ import annotations

import dataclasses

from wf.admin import Explanation
from wf.admin import Reason as Fact
from wf.cli.tui._text import at, duration, error_text


@dataclasses.dataclass(frozen=True)
class Reason:
    """One line of the explanation. ``tone``: ``info``, ``wait``, ``ok``, ``warn``, ``error``."""

    tone: str
    text: str


def lines(explanation: Explanation, now: float) -> list[Reason]:
    """The lines of the run screen's header below the run's name."""
    out = []
    for fact in explanation.reasons:
        text = _words(fact, now)
        if text is not None:
            out.append(Reason(fact.tone, text))
    return out


def _words(fact: Fact, now: float) -> str | None:
    kind = fact.kind
    if kind == "queued":
        return "Queued, not started yet: the next `wf worker` starts it."
    if kind == "completed":
        return f"Completed in {duration(fact.took or 0.0)}."
    if kind == "cancelled":
        return f"Cancelled after {duration(fact.took or 0.0)}."
    if kind == "failed":
        where = ""
        if fact.name is not None:
            where = f" in step {fact.name!r} after {fact.attempt} attempt(s)"
        return f"Failed{where} with error {error_text(fact.error)}"
    if kind == "driver_gone":
        return (
            "Driver process gone: nobody holds this run's lock. A worker will recover it, "
            f"replaying its journal ({fact.count} operation(s) done) without repeating them."
        )
    if kind == "step_running":
        attempt = f" (attempt {fact.attempt})" if (fact.attempt or 0) > 1 else ""
        verb = "Was running" if fact.stale else "Running"
        since = duration(now - (fact.since or now))
        return f"{verb} step {fact.name!r}{attempt} for {since}."
    if kind == "retrying":
        return _retry(fact, now)
    if kind == "sleeping":
        return f"Sleeping until {at(fact.at, now)}."
    if kind == "between":
        return "Running, between operations."
    if kind == "hook":
        return f"Waiting on hook `{fact.name}`: press r to send it a payload."
    if kind == "child":
        state = f" (it is {fact.status})" if fact.status else ""
        return f"Waiting on child run {fact.name}{state}: press enter on it below."
    if kind == "resume":
        return "The driver stopped (drain or reload): the next worker resumes it."
    if kind == "waiting":
        return f"Waiting for {fact.detail}."
    if kind == "suspended":
        return "Suspended."
    if kind == "due":
        return "Due now: the next worker resumes it."
    if kind == "no_timer":
        return "No timer: only a message (payload, result, wake) wakes it."
    if kind == "cancel_requested":
        return "Cancellation requested: applied when the run is next driven."
    if kind == "undelivered":
        return (
            f"{fact.count} message(s) not yet delivered ({', '.join(fact.kinds)}):"
            " the run is due, the next worker delivers them."
        )
    return None  # ``wakes``: the header shows the run's times already


def _retry(fact: Fact, now: float) -> str:
    """``Retrying step 'x': attempt 2 of 4 at T (in 3s); attempt 1 failed with E``."""
    failed = fact.attempt or 0
    of = f" of {fact.max_attempts}" if fact.max_attempts else ""
    when = f" at {at(fact.at, now)}" if fact.at is not None else ""
    return (
        f"Retrying step {fact.name!r}: attempt {failed + 1}{of}{when}; "
        f"attempt {failed} failed with {error_text(fact.error)}"
    )
