"""Retentions and waits: what the engine adds to ``wf._durations``' grammar."""

from __future__ import annotations

import datetime as dt
from typing import Any

from wf._durations import checked_seconds, written_seconds
from wf._exceptions import UsageError, finite_seconds
from wf.store._limits import LATEST, check_due, shown

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
    seconds = checked_seconds(value, written_seconds(value, what), what, _FOREVER)
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
