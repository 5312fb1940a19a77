"""Small text helpers for the screens: times relative to the app's clock, coloured statuses,
and recorded text made safe to show.

Recorded text (a run's error, a step name, a hook token, a workflow name, a value) is anyone's:
Textual reads a plain ``str`` in a table cell, a notification or a ``Static`` as markup, so
``[@click=app.screenshot(...)]`` in an error would run an action when clicked, and ``[/]``
would crash the app. Such text goes to a widget as ``rich.text.Text`` (``plain``), its control
characters shown as escapes (``wf.admin._words.visible``), or with ``markup=False``.

Every time shown is computed against ``now`` handed in by the caller (the app's clock), never
the wall clock read here, so a test's fake clock gives the same screen on every run.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from wf.admin._words import STATUS_STYLE, duration, timestamp, visible
from wf.admin._words import error_text as _error_text

__all__ = [
    "at",
    "duration",
    "error_text",
    "plain",
    "relative",
    "short",
    "status_text",
    "timestamp",
    "visible",
]


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
    """One line of at most ``width`` characters (newlines shown as ``⏎``, other control
    characters as escapes)."""
    text = _one_line(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def plain(value: Any, width: int | None = None, style: str = "") -> Text:
    """Recorded text for a table cell or a label: one line (cut at ``width`` if given),
    never read as markup."""
    return Text(_one_line(value) if width is None else short(value, width), style=style)


def _one_line(value: Any) -> str:
    return visible(str(value).replace("\r\n", "\n").replace("\n", " ⏎ "))
