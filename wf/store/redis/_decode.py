"""What the Redis store reads back, checked.

Redis holds whatever was written to it: a stray ``HSET`` or ``RPUSH`` by hand, a script of
someone else's on the same prefix, or keys evicted under ``maxmemory`` can leave a value wf
cannot read. Each reader here turns such a value into ``StoreCorrupted`` naming its key (and
field or element), never a decode error or a ``TypeError`` in whoever uses it. The stores'
callers contain that (``Faults.contain``): the item is skipped and named, everything else goes
on, as with a damaged file of the local store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from wf._exceptions import StoreCorrupted
from wf.store._base import (
    Event,
    HookRecord,
    InboxMessage,
    RunRecord,
    Schedule,
    Tombstone,
)
from wf.store._decode import checked_events, checked_message, loads_each_paused
from wf.store._decode import log_entries as log_entries  # the local store's rule


def field_of(key: str, name: str) -> str:
    """Where a hash field lives, for messages."""
    return f"field {name!r} of {key}"


def element_of(key: str, index: int) -> str:
    """Where a list element lives, for messages."""
    return f"element {index} of {key}"


def record(raw: bytes | None, where: str, run_id: str | None = None) -> RunRecord:
    """A run's record (its hash's ``rec``); ``run_id``: the run whose hash it is (a record
    naming another is damage)."""
    try:
        return RunRecord.from_json(orjson.loads(raw), run_id)  # type: ignore[arg-type]
    except StoreCorrupted as error:
        raise StoreCorrupted(f"{where}: {error}") from None
    except (orjson.JSONDecodeError, TypeError) as error:  # TypeError: no ``rec`` at all
        raise StoreCorrupted(f"{where}: the run record cannot be read ({error})") from None


def events(entries: Sequence[bytes], key: str, first: int = 0) -> list[Event]:
    """A journal, one JSON object an element (``entries`` from element ``first`` on)."""
    try:
        found: list[Any] = loads_each_paused(entries)
    except orjson.JSONDecodeError:
        found = []  # which one: looked for below, one by one
        for index, entry in enumerate(entries, start=first):
            try:
                found.append(orjson.loads(entry))
            except orjson.JSONDecodeError as error:
                where = element_of(key, index)
                raise StoreCorrupted(f"{where}: not a journal event ({error})") from None
    return checked_events(found, lambda index: element_of(key, first + index))


def inbox(flat: Sequence[bytes], key: str) -> list[InboxMessage]:
    """Messages from an inbox hash's ``HGETALL`` (field, value pairs), oldest first."""
    pairs = sorted(zip(flat[::2], flat[1::2], strict=True))
    out = []
    for message_id, value in pairs:
        name = message_id.decode(errors="backslashreplace")
        try:
            kind, data = orjson.loads(value)
        except (ValueError, TypeError) as error:  # orjson's decode error is a ValueError
            where = field_of(key, name)
            raise StoreCorrupted(f"{where}: not an inbox message ({error})") from None
        out.append(checked_message(name, kind, data, field_of(key, name)))
    return out


def hook(raw: bytes, key: str, token: str) -> HookRecord:
    """A hook (a field of the hooks hash)."""
    try:
        return HookRecord.from_json(orjson.loads(raw))
    except ValueError as error:  # orjson's decode error is one
        raise StoreCorrupted(f"{field_of(key, token)}: not a hook record ({error})") from None


def tombstone(raw: bytes, key: str, run_id: str) -> Tombstone:
    """A deleted run's tombstone (a field of the tombstones hash)."""
    try:
        return Tombstone.from_json(orjson.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        where = field_of(key, run_id)
        raise StoreCorrupted(f"{where}: not a tombstone ({error!r})") from None


def schedule(raw: bytes, key: str, schedule_id: str) -> Schedule:
    """A schedule (a field of the schedules hash)."""
    try:
        return Schedule.from_json(orjson.loads(raw))
    except (TypeError, ValueError) as error:  # orjson's decode error is a ValueError
        where = field_of(key, schedule_id)
        raise StoreCorrupted(f"{where}: not a schedule ({error})") from None


def field_name(key: bytes | str) -> str:
    """A hash field's name as text, whatever bytes a stray write left there."""
    return key.decode(errors="backslashreplace") if isinstance(key, bytes) else key
