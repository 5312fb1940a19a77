"""Everything known about one run as ``wf inspect --json`` prints it, and its ``why`` line.

The data comes from ``wf.admin.Admin.run_detail`` (the store here or a ``wf serve``: the same
shape) and the reasons from ``wf.admin.explain``; this module only puts them into JSON and
words. The shape is documented in ``docs/cli.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wf.admin._words import duration, error_text, timestamp, waiting_text

if TYPE_CHECKING:
    from wf.admin import Explanation, RunDetail


def detail_json(detail: RunDetail) -> dict[str, Any]:
    """A run's detail as ``wf inspect --json`` prints it."""
    from wf.admin import explain

    data = detail.to_json()
    why = why_line(explain(detail), detail.now)
    if detail.cancel_requested and not detail.run.status.is_terminal:
        why += "; cancellation requested"
    return {"run": data.pop("run"), "why": why, **data}


def why_line(explanation: Explanation, now: float) -> str:
    """One line saying why the run is where it is."""
    reasons = explanation.reasons
    first = reasons[0]
    if first.kind == "queued":
        return "queued: the next `wf worker` (or `wf run` of it) will start it"
    if first.kind == "held":
        ahead = f"; {first.count} run(s) ahead of it" if first.count else ""
        return f"pending: {first.detail}{ahead}"
    if first.kind == "completed":
        return f"completed in {duration(first.took)}"
    if first.kind == "cancelled":
        return f"cancelled after {duration(first.took)}"
    if first.kind == "failed":
        where = ""
        if first.name is not None:
            where = f" in step {first.name!r} after {first.attempt} attempt(s)"
        return f"failed{where}: {error_text(first.error)}"
    if explanation.status == "running":
        active = [r.name for r in reasons if r.kind == "step_running"]
        retrying = [r for r in reasons if r.kind == "retrying"]
        if active:
            names = ", ".join(repr(n) for n in active)
            return f"running step {names} (if its process died, the next worker resumes it)"
        if retrying:
            row = retrying[0]
            return f"step {row.name!r} waits to retry (attempt {(row.attempt or 0) + 1})"
        return "running (if its process died, the next worker resumes it)"
    what = waiting_text(explanation.waiting_for) or "waiting"
    wake_at = explanation.wake_at
    if wake_at is None:
        return f"suspended: {what}; wakes when a message arrives"
    if wake_at <= now:
        return f"suspended: {what}; due now, the next worker resumes it"
    return f"suspended: {what}; wakes at {timestamp(wake_at)} (in {duration(wake_at - now)})"
