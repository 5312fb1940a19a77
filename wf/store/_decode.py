"""Decoding a run's journal, tens of thousands of JSON events at once, with the cyclic garbage
collector paused.

Collected as they are made, the new dicts' young generations are walked again and again, and
their growing count keeps setting off full collections of the whole heap: inside a drive,
parsing a 10,000-step journal from the local store cost 5.8-6.4 µs a step on average, and 2.7
with the collector paused. Paused, the events are walked once, by the next collection, which
also stops tracking the ones that hold only atomic values. The collector's state is given back
as it was found.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from wf._events import journal_damage
from wf._exceptions import StoreCorrupted
from wf.store._base import InboxMessage


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the collector for the block."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def loads_paused(data: bytes | bytearray | memoryview | str) -> Any:
    """``orjson.loads`` with the collector paused (about a microsecond more for a small value:
    for a whole journal, not for each of many small values)."""
    with collector_paused():
        return orjson.loads(data)


def loads_each_paused(items: Iterable[bytes | str]) -> list[Any]:
    """``orjson.loads`` of each item, with the collector paused for all of them: a journal as
    Redis holds it, one event an entry."""
    with collector_paused():
        return [orjson.loads(item) for item in items]


def checked_events(events: list[Any], where: Callable[[int], str]) -> list[Any]:
    """A journal's decoded events, each a JSON object; else ``StoreCorrupted`` naming the
    first that is not (``where(index)`` says where it lives)."""
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            kind = type(event).__name__
            raise StoreCorrupted(f"{where(index)}: not a journal event (a JSON {kind})")
    return events


def journal_problems(where: str, events: list[Any]) -> list[str]:
    """For ``verify``: the journal's first damaged event (``wf._events.journal_damage``: an
    event replay cannot use, or one out of its place) as a line naming ``where`` the journal
    lives; none if it is sound. A driver fails such a run as damaged (``StoreCorrupted``)."""
    found = journal_damage(events)
    if found is None:
        return []
    return [f"{where}: {found} (the run cannot be replayed)"]


def checked_message(message_id: str, kind: Any, data: Any, where: str) -> InboxMessage:
    """An inbox message as a store holds it (a kind and a JSON object); else
    ``StoreCorrupted`` naming ``where``."""
    if not isinstance(kind, str) or not isinstance(data, dict):
        shape = f"{type(kind).__name__} kind, {type(data).__name__} data"
        raise StoreCorrupted(f"{where}: not an inbox message ({shape})")
    return InboxMessage(message_id, kind, data)


_LOG_FIELDS: dict[str, tuple[type, ...]] = {
    "ts": (int, float),
    "op": (int,),
    "attempt": (int,),
    "resumes": (int,),
    "step": (str,),
    "stream": (str,),
    "text": (str,),
    "level": (str,),
    "logger": (str,),
    "trace_id": (str,),
    "span_id": (str,),
}
"""The types of a step log entry's fields (``wf.engine._steplogs`` writes them), for those it
has: every reader formats them (a time, a step's name), so one of another type is no entry."""


_LOG_SHAPES: set[tuple[object, ...]] = set()
"""Shapes of objects found to be entries: the keys, then the exact type of each value (the
tuple's halves). Whether an object is an entry depends on its shape alone, and the engine's
writer makes a few (a print or a log record, with or without a trace): a known one is
recognized without a look at each field (about half the cost)."""


def is_log_entry(entry: object) -> bool:
    """Whether a decoded line is a step log entry: an object with a text and a time, and each
    field it has of its type."""
    shape = None
    if type(entry) is dict:
        shape = (*entry, *map(type, entry.values()))
        if shape in _LOG_SHAPES:
            return True
    if not isinstance(entry, dict) or "text" not in entry or "ts" not in entry:
        return False
    for field, types in _LOG_FIELDS.items():
        value = entry.get(field)
        if field in entry and (not isinstance(value, types) or isinstance(value, bool)):
            return False
    if shape is not None and len(_LOG_SHAPES) < 64:
        _LOG_SHAPES.add(shape)
    return True


def log_entries(lines: Iterable[bytes]) -> list[Any]:
    """A run's step log entries, one JSON object a line (a file's line, a list's element):
    one that is not (torn, or a stray write: not an object, or a field of another type) is
    skipped and not counted, so ``start`` positions count the entries returned."""
    entries = []
    for line in lines:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if is_log_entry(entry):
            entries.append(entry)
    return entries
