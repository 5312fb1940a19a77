"""Durations as users write them: ``90``, ``90s``, ``5m``, ``2h``, ``1d``, a ``timedelta``."""

from __future__ import annotations

import datetime as dt
import re

from wf._exceptions import UsageError

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


def parse_retention(value: str | float | int | dt.timedelta, *, what: str = "retention") -> float:
    """Seconds of a retention, as ``parse_duration``; zero is refused with a ``UsageError``: it
    would delete every run's result as it ends, before anyone could read it."""
    seconds = parse_duration(value, what=what)
    if seconds == 0:
        raise UsageError(
            f"{what}: 0 would delete each run's result as soon as it ends, before anyone reads "
            "it; give a positive duration (a workflow's retention=None keeps its runs forever)"
        )
    return seconds
