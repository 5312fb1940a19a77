"""Durations as users write them: ``90``, ``90s``, ``5m``, ``2h``, ``1d``, a ``timedelta``."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from wf._exceptions import UsageError, finite_seconds
from wf.store._limits import LATEST, check_due, shown

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(value: str | float | int | dt.timedelta, *, what: str = "duration") -> float:
    """Seconds of ``value``: a number (seconds), a ``timedelta``, or text like ``30d``.

    Raises ``UsageError`` naming ``what`` for anything else, a negative value, or one that is
    no finite number of seconds (NaN, infinity, an int or digits past a float's range).
    """
    return _checked(value, _seconds(value, what), what, "")


def _seconds(value: object, what: str) -> float:
    """Seconds of ``value`` as it is written, not yet checked (NaN and infinity pass)."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an int past a float's range
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        match = _DURATION.match(value.lower())
        if match is None:
            raise UsageError(
                f"{what}: {value[:60]!r} is not a duration (write 90, 90s, 5m, 2h, 1d or 2w)"
            )
        return float(match.group(1)) * _UNITS[match.group(2)]  # inf past a float's range
    raise UsageError(f"{what}: expected a duration, got {type(value).__name__}")


def _checked(value: object, seconds: float, what: str, forever: str) -> float:
    """``seconds`` if finite and not negative (``-0.0`` read as 0), else a ``UsageError``;
    ``forever``: how keeping forever is spelled where infinity means it to a reader."""
    if not math.isfinite(seconds):
        raise UsageError(f"{what}: {_shown(value)} is not a finite duration{forever}")
    if seconds < 0:
        raise UsageError(f"{what}: a duration cannot be negative ({_shown(value)})")
    return seconds or 0.0


def _shown(value: object) -> str:
    """``value`` as written, cut short (a string of 400 digits is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


MIN_RETENTION = 1.0
"""The shortest retention taken, in seconds: a shorter one deletes runs as they end."""

_FOREVER = (
    " (give one like '30d'; to keep runs forever leave the store-wide retention unset, or "
    "give a workflow retention=None)"
)
"""How keeping forever is spelled, said to whoever gives an infinite retention."""


def parse_retention(value: str | float | int | dt.timedelta, *, what: str = "retention") -> float:
    """Seconds of a retention, as ``parse_duration``; under one second (zero included) is
    refused with a ``UsageError``: it would delete every run's result as it ends, before
    anyone could read it."""
    seconds = _checked(value, _seconds(value, what), what, _FOREVER)
    if seconds < MIN_RETENTION:
        given = "0" if seconds == 0 else f"{seconds:g} s"
        raise UsageError(
            f"{what}: {given} would delete each run's result as soon as it ends, before anyone "
            "reads it; give one second or more (a workflow's retention=None keeps its runs "
            "forever)"
        )
    return seconds


def wait_seconds(what: str, value: Any) -> float:
    """Seconds of a wait a workflow asks for (``wf.sleep``, ``wf.timeout``): a real number or a
    ``timedelta``, finite (``wf._exceptions.finite_seconds``), at most the span to 9999-12-31;
    else a ``UsageError`` naming ``what``. A negative wait is no wait, as for ``asyncio.sleep``
    and a run's ``delay``."""
    seconds = finite_seconds(what, value)
    if seconds > LATEST:
        raise UsageError(f"{what}: {shown(value)} ends past 9999-12-31, the latest due time")
    return seconds


def due_after(what: str, now: float, seconds: float) -> float:
    """The time ``seconds`` after ``now`` (none before it), or a ``UsageError`` naming ``what``
    if that is past 9999-12-31, the latest due time wf keeps."""
    return check_due(f"{what} (of {seconds:g} s)", now + max(0.0, seconds))
