"""Small renderers shared by the commands: times, durations, statuses, JSON on stdout."""

from __future__ import annotations

import datetime as _dt
import json
import sys
from typing import Any

from wf.store._limits import BEYOND, datetime_of

STATUS_STYLE = {
    "pending": "cyan",
    "running": "blue",
    "suspended": "yellow",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
    # step statuses
    "retrying": "yellow",
    "sleeping": "yellow",
    "interrupted": "magenta",
    "done": "green",
}


def styled_status(status: str) -> str:
    """``status`` with rich markup for its colour."""
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/{style}]" if style else status


def timestamp(ts: float | None) -> str:
    """Epoch seconds as local wall time, ``2025-01-31 14:03:07``."""
    if ts is None:
        return "-"
    when = datetime_of(ts, None)
    return BEYOND if when is None else when.strftime("%Y-%m-%d %H:%M:%S")


def clock_time(ts: float | None) -> str:
    """Epoch seconds as local time of day, with the date only when it is not today."""
    if ts is None:
        return "-"
    when = datetime_of(ts, None)
    if when is None:
        return BEYOND
    if when.date() == _dt.date.today():
        return when.strftime("%H:%M:%S")
    return when.strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """A short human duration: ``0.12s``, ``4.5s``, ``3m07s``, ``2h05m``, ``3d04h``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def public_type(name: str) -> str:
    """``wf._exceptions.FatalError`` (older journals) -> ``wf.FatalError``."""
    return (
        "wf." + name.removeprefix("wf._exceptions.") if name.startswith("wf._exceptions.") else name
    )


def error_text(error: dict[str, Any] | None) -> str:
    """``Type: message`` of a recorded error (the type without its module for builtins; wf's
    own errors as users import them, ``wf.FatalError``, also in journals written before)."""
    if not error:
        return ""
    kind = public_type(str(error.get("type") or "Error"))
    message = str(error.get("message") or "")
    return f"{kind}: {message}" if message else kind


REPLAY_STYLE = {"ok": "green", "diverged": "red", "error": "red"}
"""Colour of each replay-check status (``wf inspect --replay``, the TUI's replay check)."""


def replay_detail(replays: dict[str, Any]) -> str:
    """What a replay check found beyond its status: where it diverged, or why it failed."""
    divergence = replays.get("divergence")
    if divergence:
        return (
            f"operation #{divergence['index']} recorded {divergence['recorded']}, "
            f"current code calls {divergence['current']} at {divergence['location']}"
        )
    if replays["status"] == "error":
        return str(replays.get("message", ""))
    return ""


def stdout_console() -> Any:
    """A rich console on stdout; in a pipe, wide enough that tables are never squeezed."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich's own answer is a silent exit 1; wf's is one line and exit 2 (closed_pipe).
            self.quiet = True
            raise BrokenPipeError

    return _Console(width=None if sys.stdout.isatty() else 240, highlight=False)


def print_json(data: Any) -> None:
    """Write ``data`` as JSON on stdout: indented on a terminal, one line in a pipe."""
    indent = 2 if sys.stdout.isatty() else None
    text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def recovery_text(entry: dict[str, Any]) -> str:
    """One recovery from a dead driver (an entry of ``wf inspect --json``'s ``recoveries``)
    in words."""
    steps = ", ".join(
        f"{step.get('name')!r} (op {step.get('op')})" for step in entry.get("steps") or []
    )
    where = f" in step {steps}" if steps else ""
    then = "the run failed stalled" if entry.get("stalled") else "recovered"
    return (
        f"its driving process died{where}, {entry.get('in_a_row')} time(s) in a row without "
        f"progress; {then}"
    )


def waiting_text(waiting_for: Any) -> str:
    """What a suspended run waits for, in words: ``hook 'k1'; sleep until 12:00:00``.

    Takes the record's or the ``run_suspended`` event's ``waiting_for`` (structured, or an older
    wf's sentence, shown as it is). Empty when there is nothing to say.
    """
    from wf._events import read_waiting

    parts = []
    for item in read_waiting(waiting_for) or ():
        kind, target, until = item["kind"], item["target"], item["until"]
        when = _iso(until) if until is not None else None
        if kind == "text":
            parts.append(str(target))
        elif kind == "hook":
            parts.append(f"hook {target!r}")
        elif kind == "child":
            parts.append(f"child run {target}")
        elif kind == "sleep":
            parts.append(f"sleep until {when}" if when else "sleep")
        elif kind == "retry":
            parts.append(f"retry of step {target!r}")  # when: the run's wake-up time
        elif kind == "timeout":
            parts.append(f"timeout at {when}" if when else "timeout")
        elif kind == "resume":
            parts.append("resume (the driver stopped)")
        else:
            parts.append(str(kind))
    return "; ".join(dict.fromkeys(parts))


def _iso(ts: float) -> str:
    when = datetime_of(ts)
    return BEYOND if when is None else when.isoformat(timespec="seconds")
