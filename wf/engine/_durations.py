"""Durations as users write them: ``90``, ``90s``, ``5m``, ``2h``, ``1d``, a ``timedelta``."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from wf._exceptions import UsageError, finite_seconds
from wf.store._limits import LATEST, check_due, shown

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(value: str | float | int | dt.timedelta, *, what: str = "duration") -> float:
    """Seconds of ``value``: a number (seconds), a ``timedelta``, or text like ``30d``.

    Raises ``UsageError`` naming ``what`` for anything else, or a negative value.
    """
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise UsageError(f"{what}: expected a duration, got {value!r}")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value.lower())
        if match is None:
            raise UsageError(
                f"{what}: {value!r} is not a duration (write 90, 90s, 5m, 2h, 1d or 2w)"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise UsageError(f"{what}: expected a duration, got {type(value).__name__}")
    if seconds < 0 or seconds != seconds:
        raise UsageError(f"{what}: a duration cannot be negative ({value!r})")
    return seconds


MIN_RETENTION = 1.0
"""The shortest retention taken, in seconds: a shorter one deletes runs as they end."""


def parse_retention(value: str | float | int | dt.timedelta, *, what: str = "retention") -> float:
    """Seconds of a retention, as ``parse_duration``; under one second (zero included) is
    refused with a ``UsageError``: it would delete every run's result as it ends, before
    anyone could read it."""
    seconds = parse_duration(value, what=what)
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
