"""Small text helpers for the screens: times relative to the app's clock, coloured statuses.

Every time shown is computed against ``now`` handed in by the caller (the app's clock), never
the wall clock read here, so a test's fake clock gives the same screen on every run.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from wf.admin._words import STATUS_STYLE, duration, timestamp
from wf.admin._words import error_text as _error_text

__all__ = ["at", "duration", "error_text", "relative", "short", "status_text", "timestamp"]


def at(ts: float | None, now: float) -> str:
    """``2027-01-15 08:00:00 (in 3m07s)``: the moment and its distance from now."""
    if ts is None:
        return "-"
    return f"{timestamp(ts)} ({relative(ts, now)})"


def relative(ts: float, now: float) -> str:
    """``in 3m07s``, ``3m07s ago`` or ``now``."""
    delta = ts - now
    if abs(delta) < 0.5:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


def error_text(error: dict[str, Any] | None) -> str:
    """``Type: message``, with wf's own errors named as users import them (``wf.FatalError``)."""
    text = _error_text(error)
    return (
        "wf." + text.removeprefix("wf._exceptions.") if text.startswith("wf._exceptions.") else text
    )


def status_text(status: str) -> Text:
    """The status word in its colour (the same colours as ``wf runs``)."""
    return Text(status, style=STATUS_STYLE.get(status, ""))


def short(value: Any, width: int = 80) -> str:
    """One line of at most ``width`` characters (newlines shown as ``⏎``)."""
    text = str(value).replace("\r\n", "\n").replace("\n", " ⏎ ")
    return text if len(text) <= width else text[: width - 1] + "…"
