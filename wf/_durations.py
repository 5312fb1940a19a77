"""Durations as users write them: ``90``, ``90s``, ``5m``, ``2h``, ``1d``, ``2w``, a ``timedelta``.

One grammar for every front end: the API's ``delay=`` and retentions, the configuration file,
the environment and the command line's ``--delay`` and ``--older-than`` read durations alike.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from wf._exceptions import UsageError

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(value: str | float | int | dt.timedelta, *, what: str = "duration") -> float:
    """Seconds of ``value``: a number (seconds), a ``timedelta``, or text like ``30d``.

    Raises ``UsageError`` naming ``what`` for anything else, a negative value, or one that is
    no finite number of seconds (NaN, infinity, an int or digits past a float's range).
    """
    return checked_seconds(value, written_seconds(value, what), what, "")


def written_seconds(value: object, what: str) -> float:
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


def checked_seconds(value: object, seconds: float, what: str, forever: str) -> float:
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
