"""Cron expressions in a time zone: checking them and computing their fire times (croniter,
``zoneinfo``), with the daylight-saving rules ``_schedules`` describes. Shared by registering
and firing schedules (``_schedules``) and by bounded catch-up (``_catchup``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from wf._exceptions import UsageError
from wf.store._limits import shown


def check_tz(tz: str | None) -> dt.tzinfo:
    """The zone named ``tz`` (UTC for None); ``UsageError`` naming the field if unknown."""
    if tz is None:
        return dt.UTC
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        # OSError: a name too long for a file name (the zone database is files).
        raise UsageError(
            f"tz: unknown time zone {shown(tz)} (use an IANA name like 'Europe/Paris' or 'UTC')"
        ) from None


_MACHINE_ZONES = frozenset({"localtime", "posixrules", "Factory"})
"""Names a zone database may hold that are not a place's rules: ``localtime`` and
``posixrules`` are whatever zone this machine was set to (another worker's may differ), and
``Factory`` is the "no zone set" placeholder."""


def zone_name(tz: object) -> str | None:
    """The zone a new schedule is given, as the name it keeps: an IANA name, a
    ``zoneinfo.ZoneInfo`` (its key) or UTC (``datetime.UTC``); None for UTC by default.
    ``UsageError`` for anything else, and for names that mean a different zone on another
    machine (``localtime``, ``posixrules``, ``posix/``... and ``right/``... copies)."""
    if tz is None:
        return None
    if tz is dt.UTC:
        return "UTC"
    if isinstance(tz, ZoneInfo) and tz.key is not None:
        tz = tz.key
    if not isinstance(tz, str):
        raise UsageError(
            f"tz: expected an IANA zone name like 'Europe/Paris' (or a zoneinfo.ZoneInfo), "
            f"got {shown(tz)}"
        )
    if tz in _MACHINE_ZONES or tz.startswith(("posix/", "right/")):
        raise UsageError(
            f"tz: {shown(tz)} is not a place's zone: it depends on the machine's zone files "
            "(use an IANA name like 'Europe/Paris' or 'UTC')"
        )
    check_tz(tz)
    return tz


def check_cron(cron: object) -> str:
    """The expression if croniter accepts it; else ``UsageError`` naming the field."""
    from croniter import croniter

    if not isinstance(cron, str) or not cron.strip():
        raise UsageError("cron: an expression is required, e.g. '0 3 * * *' (03:00 every day)")
    try:
        croniter(cron)
    except (ValueError, KeyError, TypeError) as error:
        reason = str(error) or type(error).__name__
        raise UsageError(f"cron: {cron!r} is not a valid cron expression ({reason})") from None
    return cron.strip()


_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""croniter's macros, spelled out: ``@daily`` is midnight, a fixed time like ``0 0 * * *``."""


def fixed_time(cron: str) -> bool:
    """Whether the expression names fixed minutes and hours (no ``*`` in either field), its
    macro (``@daily``...) spelled out first."""
    fields = _MACROS.get(cron.strip().lower(), cron).split()
    if len(fields) < 2 or fields[0].startswith("@"):
        return False
    return "*" not in fields[0] and "*" not in fields[1]


def next_fire(cron: str, tz: str | None, after: float) -> float | None:
    """The first fire time strictly after ``after`` (epoch seconds), DST rules applied; None
    when the series has ended (no time the expression names comes after ``after``)."""
    return next(fire_times(cron, tz, after), None)


def fire_times(
    cron: str, tz: str | None, after: float, *, including: bool = False
) -> Iterator[float]:
    """Fire times after ``after`` (or at it, ``including``), oldest first, on one croniter, DST
    rules applied; they stop where the series ends (croniter searched to the end of its
    calendar)."""
    from croniter import CroniterBadDateError

    zone = check_tz(tz)
    fixed = fixed_time(cron)
    it = series(cron, dt.datetime.fromtimestamp(after - 1 if including else after, zone))
    while True:
        try:
            when: dt.datetime = it.get_next(dt.datetime)
        except CroniterBadDateError:
            return
        at = when.timestamp()
        if at < after or (at == after and not including):
            continue
        if fixed and dt.datetime.fromtimestamp(at, zone).fold == 1:
            continue  # the repeated hour of a fall-back night: this wall time fired already
        yield at


def series(cron: str, start: dt.datetime) -> Any:
    """croniter over ``cron`` from ``start``, searching as far as its year field reaches.

    croniter gives up after 50 years without a match by default; a year field (croniter's
    seventh) may name any year up to 2099, so the search goes that far. An expression that
    never matches costs a few milliseconds to prove so.
    """
    from croniter import croniter

    reach = max(50, _LAST_CRON_YEAR + 1 - start.year)
    return croniter(cron, start, max_years_between_matches=reach)


_LAST_CRON_YEAR = 2099
"""The last year croniter's year field accepts."""


def first_fire(cron: str, tz: str | None, now: float) -> float:
    """The first fire time after ``now``; ``UsageError`` in one line when there is none (the
    expression names no date that exists, or its whole series lies in the past)."""
    from croniter import CroniterBadDateError

    upcoming = next_fire(cron, tz, now)
    if upcoming is not None:
        return upcoming
    zone = check_tz(tz)
    try:
        last: dt.datetime = series(cron, dt.datetime.fromtimestamp(now, zone)).get_prev(dt.datetime)
    except CroniterBadDateError:
        raise UsageError(f"cron: {cron!r} never fires (no date matches it)") from None
    raise UsageError(
        f"cron: {cron!r} never fires again (its last time was {zoned_time(last.timestamp(), tz)})"
    )


def zoned_time(ts: float, tz: str | None) -> str:
    """Epoch seconds as wall time in the zone ``tz`` (UTC for None or a zone this machine does
    not know), labelled with the zone's abbreviation: ``2026-12-04 02:30 CET``. Seconds show
    only when not zero; a zone whose abbreviation is a bare offset (``+04``) is also named."""
    try:
        zone = check_tz(tz)
    except UsageError:
        zone, tz = dt.UTC, None
    moment = dt.datetime.fromtimestamp(ts, zone)
    text = moment.strftime("%Y-%m-%d %H:%M:%S" if moment.second else "%Y-%m-%d %H:%M")
    label = moment.tzname() or "UTC"
    if tz is not None and label[:1] in "+-":
        label = f"{tz} ({label})"
    return f"{text} {label}"
