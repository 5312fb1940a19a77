"""What a name or a due time may be: checked once, where the value is given.

Hook tokens, stream names, group keys and queue names become file names (hashed), database
keys and journal text, so a value none of those can hold must be refused where a user or a
workflow gives it, as a ``wf.UsageError`` — never let through to fail at the store, where a
run would be retried for ever. Run ids and schedule ids have stricter forms of their own
(``_ids``, ``wf.engine._schedules``).

Due times stop at the end of year 9999 (UTC): past it no ``datetime`` can show them. A store
written before these checks may still hold such a time; ``datetime_of`` lets every listing show
what it can instead of failing.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from wf._exceptions import UsageError

MAX_NAME_LENGTH = 512
"""The longest hook token, stream name, group key or queue name, in characters."""

LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()
"""The latest due time, in seconds since the epoch: 9999-12-31T23:59:59Z."""

# Control characters (C0, DEL, C1) garble terminals and logs, NUL fits no database text, and a
# lone surrogate is not text at all (no UTF-8 encodes it).
_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to what an error line can carry (an integer too long to print
    says its size instead)."""
    try:
        text = repr(value)
    except Exception:  # repr of a 5,000-digit int is refused; a user's type may fail
        if isinstance(value, int):
            return f"an integer of {value.bit_length()} bits"
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def with_article(noun: str) -> str:
    """``noun`` after its indefinite article, as a message reads it: ``an int``, ``a str``,
    ``an enum``, ``a UUID``, ``a union`` (by the first letters: a message names types)."""
    first = noun[:1]
    if first in "aeioAEIO" and first:
        return f"an {noun}"
    if first == "u" and not noun.startswith(("uni", "use", "usa", "usu", "uti", "ure")):
        return f"an {noun}"
    return f"a {noun}"


def check_name(what: str, value: object) -> str:
    """``value`` if it may be a name (``what`` says which kind), else ``UsageError``.

    A name is a non-empty ``str`` of at most ``MAX_NAME_LENGTH`` characters, none of them a
    control character or a lone surrogate."""
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise UsageError(f"{what} cannot be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise UsageError(
            f"{what} is {len(value)} characters long; at most {MAX_NAME_LENGTH} are allowed"
        )
    bad = _REFUSED.search(value)
    if bad is not None:
        kind = "a lone surrogate" if "\ud800" <= bad.group() <= "\udfff" else "a control character"
        shown = repr(value) if len(value) <= 60 else repr(value[:60]) + "..."
        raise UsageError(f"{what} {shown} holds {kind} ({bad.group()!r}), which cannot be a name")
    return value


def check_segment(what: str, value: object) -> str:
    """``check_name``, and not ``.`` or ``..``: for a new name that URLs carry as one path
    segment (a hook token, a stream name), where those two mean "here" and "up" to every
    browser and HTTP client, percent-encoded or not. Readers take any name (``check_name``):
    one recorded before is still read where it can be."""
    name = check_name(what, value)
    if name in (".", ".."):
        raise UsageError(f"{what} cannot be {name!r}: a URL cannot carry it as a name")
    return name


MAX_KEY_LENGTH = 255
"""The longest idempotency key (``wf.resume_hook(key=...)``), in characters."""

_KEY = re.compile(r"[!-~](?:[ -~]*[!-~])?")


def check_key(value: object) -> str:
    """``value`` if it may be an idempotency key, else ``UsageError``: 1-255 printable ASCII
    characters, no space at either end, so that an HTTP header (``Idempotency-Key``) carries
    it as it is."""
    if not isinstance(value, str):
        raise UsageError(f"an idempotency key must be a string, not {type(value).__name__}")
    if len(value) > MAX_KEY_LENGTH or not _KEY.fullmatch(value):
        raise UsageError(
            f"an idempotency key is 1-{MAX_KEY_LENGTH} printable ASCII characters with no space"
            f" at either end, not {shown(value)}"
        )
    return value


def check_due(what: str, at: float) -> float:
    """``at`` (epoch seconds) if it is a due time wf can keep, else ``UsageError``."""
    if not math.isfinite(at) or at > LATEST:
        raise UsageError(f"{what} is past 9999-12-31T23:59:59Z, the latest due time")
    return at


def check_at(what: str, at: dt.datetime) -> float:
    """The epoch seconds of an aware ``datetime`` that is a valid due time, else ``UsageError``
    (a time of 9999-12-31 with a negative offset is already in year 10000 in UTC)."""
    try:
        stamp = at.timestamp()
    except (OverflowError, ValueError):
        stamp = math.inf
    return check_due(f"{what} ({at.isoformat()})", stamp)


def datetime_of(stamp: float | None, tz: dt.tzinfo | None = dt.UTC) -> dt.datetime | None:
    """``stamp`` as a ``datetime`` in ``tz`` (None: local time), or None when no ``datetime``
    holds it (past year 9999, not finite: written by an older wf) or ``stamp`` is None."""
    if stamp is None:
        return None
    try:
        return dt.datetime.fromtimestamp(stamp, tz)
    except (OverflowError, OSError, ValueError):
        return None


BEYOND = "after 9999-12-31"
"""How a listing shows a time ``datetime_of`` cannot hold."""


def iso_time(ts: float) -> str:
    """Epoch seconds as ISO 8601 in UTC, ``2026-12-06T04:40:17+00:00``: a moment in a line
    read by a program too (a log line of ``wf worker`` for shippers, docs/cli.md "Times")."""
    when = datetime_of(ts)
    return BEYOND if when is None else when.isoformat(timespec="seconds")
