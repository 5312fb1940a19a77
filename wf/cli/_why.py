"""``wf.admin.explain``'s reasons in words, one sentence each: the terminal UI's run header and
the web UI's run page say them alike (``wf inspect``'s one-line ``why`` is in ``_inspect_data``).

A front end passes how it shows a moment (``at``) and its own hints for the reasons it can act
on (the TUI: "press r to send it a payload"; the web UI: "send it a payload below").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from wf.admin import Reason
from wf.cli._format import duration, error_text

Moment = Callable[[float | None, float], str]
"""How a front end shows a moment relative to now: ``at(ts, now)``."""


def _error(error: dict[str, object] | None) -> str:
    text = error_text(error)
    return "wf." + text.removeprefix("wf._exceptions.") if text.startswith("wf._exc") else text


def sentence(
    fact: Reason, now: float, *, at: Moment, hints: Mapping[str, str] | None = None
) -> str | None:
    """One reason in words (None for ``wakes``: the run's times say it already)."""
    hint = (hints or {}).get(fact.kind)
    kind = fact.kind
    if kind == "queued":
        return "Queued, not started yet: the next `wf worker` starts it."
    if kind == "held":
        ahead = f" ({fact.count} run(s) ahead of it)" if fact.count else ""
        return f"Pending: {fact.detail}{ahead}."
    if kind == "completed":
        return f"Completed in {duration(fact.took or 0.0)}."
    if kind == "cancelled":
        return f"Cancelled after {duration(fact.took or 0.0)}."
    if kind == "failed":
        where = ""
        if fact.name is not None:
            where = f" in step {fact.name!r} after {fact.attempt} attempt(s)"
        return f"Failed{where} with error {_error(fact.error)}"
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
        failed = fact.attempt or 0
        of = f" of {fact.max_attempts}" if fact.max_attempts else ""
        when = f" at {at(fact.at, now)}" if fact.at is not None else ""
        return (
            f"Retrying step {fact.name!r}: attempt {failed + 1}{of}{when}; "
            f"attempt {failed} failed with {_error(fact.error)}"
        )
    if kind == "sleeping":
        return f"Sleeping until {at(fact.at, now)}."
    if kind == "between":
        return "Running, between operations."
    if kind == "hook":
        return f"Waiting on hook `{fact.name}`" + (f": {hint}." if hint else ".")
    if kind == "child":
        state = f" (it is {fact.status})" if fact.status else ""
        return f"Waiting on child run {fact.name}{state}" + (f": {hint}." if hint else ".")
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
    return None
