"""Which missed fires of a schedule a worker decides now: a catch-up in bounded work.

A schedule whose next fire lies far back (a worker down for a day, for ten years) has a
backlog of missed fires that can run into millions. Enumerating them one by one would hold the
event loop for minutes, so nothing here walks the whole gap:

- ``"one"`` and ``"none"`` need only the latest missed fire: croniter steps back from now
  (``get_prev``), and the next fire is computed from there. The fires before it are counted,
  up to ``MISSED_COUNTED`` (beyond that the count is a lower bound, and says so).
- ``"all"`` decides at most ``FIRES_PER_PASS`` fires per pass, and never more than the latest
  ``CATCH_UP_MAX`` of a backlog: older fires are counted as missed, like ``"one"``'s.

Fire times keep ``next_fire``'s rules (DST gaps and repeated hours): croniter's steps back only
find where to start; every fire decided is one ``next_fire`` names.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from wf.engine._cron import check_tz, fire_times, next_fire, series

FIRES_PER_PASS = 100
"""At most this many fires of one schedule are decided per pass (``catch_up="all"`` after a
long outage catches up over several passes, the worker's loop running between them)."""
CATCH_UP_MAX = 1000
"""``catch_up="all"`` starts at most the latest this many missed fires; older ones are missed."""
MISSED_COUNTED = 1000
"""Missed fires are counted one by one up to this many; beyond, the count is a lower bound."""


@dataclass
class Plan:
    """The fires of one schedule to decide now."""

    due: list[float]
    """Fires to decide one by one (start, or skip), oldest first."""
    next_run: float | None
    """The first fire after ``due``; None when the series ended with them."""
    passed: int = 0
    """Older fires passed over without a decision: missed."""
    passed_more: bool = False
    """``passed`` is a lower bound: counting stopped at ``MISSED_COUNTED``."""
    last_passed: float | None = None
    """The latest of the passed-over fires (as far as counted)."""


def plan(cron: str, tz: str | None, catch_up: str, first: float, now: float) -> Plan:
    """The fires to decide at ``now`` for a schedule whose next fire is ``first`` (<= now)."""
    if catch_up == "all":
        return _plan_all(cron, tz, first, now)
    return _plan_latest(cron, tz, first, now)


def _plan_latest(cron: str, tz: str | None, first: float, now: float) -> Plan:
    """``"one"`` and ``"none"``: only the latest fire at or before ``now`` is decided."""

    start = first
    near = _step_back(cron, tz, now, 2, stop=first)
    if near is not None:
        # Two fires back (croniter's reckoning): the walk below is short, and starts on a
        # fire ``next_fire`` names.
        candidate = next_fire(cron, tz, near - 1)
        if candidate is not None and first < candidate <= now:
            start = candidate
    tail, upcoming = _walk(cron, tz, start, now)
    made = Plan(due=tail[-1:], next_run=upcoming)
    if start > first:
        made.passed, made.passed_more, made.last_passed = _count(cron, tz, first, start)
    made.passed += len(tail) - 1
    if len(tail) > 1:
        made.last_passed = tail[-2]
    return made


def _plan_all(cron: str, tz: str | None, first: float, now: float) -> Plan:
    """``"all"``: a slice of ``FIRES_PER_PASS`` fires, of the latest ``CATCH_UP_MAX``."""

    due, upcoming = _walk(cron, tz, first, now)
    if upcoming is None or upcoming > now:
        return Plan(due=due, next_run=upcoming)  # the whole backlog fits in this pass
    oldest = _step_back(cron, tz, now, CATCH_UP_MAX, stop=first)
    start = next_fire(cron, tz, oldest - 1) if oldest is not None else None
    if start is None or not first < start <= now:
        return Plan(due=due, next_run=upcoming)  # at most CATCH_UP_MAX behind: slice by slice
    passed, more, last = _count(cron, tz, first, start)
    due, upcoming = _walk(cron, tz, start, now)
    return Plan(due, upcoming, passed, more, last)


def _walk(cron: str, tz: str | None, start: float, now: float) -> tuple[list[float], float | None]:
    """The fires from ``start`` (a fire) up to ``now``, at most ``FIRES_PER_PASS``; and the
    fire after the last of them (None: the series ended)."""

    fires: list[float] = []
    at: float | None = start
    while at is not None and at <= now and len(fires) < FIRES_PER_PASS:
        fires.append(at)
        at = next_fire(cron, tz, at)
    return fires, at


def _step_back(cron: str, tz: str | None, now: float, steps: int, *, stop: float) -> float | None:
    """croniter's ``steps``-th time back from ``now`` (``now`` itself is the first when it is
    one); None when that reaches ``stop`` or earlier (or croniter finds nothing)."""
    from croniter import CroniterBadDateError

    zone = check_tz(tz)
    # get_prev looks strictly before its start: start a second on, so ``now`` is included.
    it = series(cron, dt.datetime.fromtimestamp(math.floor(now) + 1, zone))
    at = math.inf
    try:
        for _ in range(steps):
            when: dt.datetime = it.get_prev(dt.datetime)
            at = when.timestamp()
            if at <= stop:
                return None
    except CroniterBadDateError:
        return None
    return at if at <= now else None


def _count(
    cron: str, tz: str | None, first: float, before: float
) -> tuple[int, bool, float | None]:
    """How many fires from ``first`` up to (not including) ``before``, counting at most
    ``MISSED_COUNTED``; whether there were more; the latest of them."""
    counted, last = 0, None
    for at in fire_times(cron, tz, first, including=True):
        if at >= before:
            return counted, False, last
        if counted >= MISSED_COUNTED:
            # The latest of them, for ``last_skipped_at``: one step back from ``before``.
            return counted, True, _step_back(cron, tz, before - 1, 1, stop=first) or last
        counted, last = counted + 1, at
    return counted, False, last
