"""The journal file: JSON Lines, one event per line, appended only by the lease holder.

Every append is whole lines, so every append starts on a fresh line. A crash in the middle of a
write can leave a *torn* last line, without its newline: it was never reported durable, so the
next lease holder cuts it off (``repair_tail``) and readers ignore it (it may also be a line
being written right now). Anything else that does not decode is corruption, reported with the
file and line number: wf never guesses which events to skip.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import orjson

from wf._exceptions import StoreCorrupted, StoreError
from wf.store._base import Event
from wf.store.local import _fsops

_TAIL_BLOCK = 64 * 1024


def encode(events: Sequence[Event], path: str) -> bytes:
    """The lines for ``events``; a non-JSON event is the caller's bug, reported as such."""
    try:
        return b"".join([orjson.dumps(event) + b"\n" for event in events])
    except TypeError as error:
        raise StoreError(f"cannot append to {path}: event is not JSON ({error})") from None


def parse(data: bytes, path: str) -> list[Event]:
    """Decode journal bytes, ignoring a torn last line; raise ``StoreCorrupted`` otherwise."""
    end = data.rfind(b"\n") + 1
    body = data[:end]
    if not body:
        return []
    # One decode of the whole journal as a JSON array is much faster than one per line; only
    # when it fails do we go line by line to name the culprit.
    try:
        events = orjson.loads(b"[" + body[:-1].replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        events = None
    lines = body.count(b"\n")
    if isinstance(events, list) and len(events) == lines and all(type(e) is dict for e in events):
        return events
    return _parse_lines(body, path)


def _parse_lines(body: bytes, path: str) -> list[Event]:
    events: list[Event] = []
    for number, line in enumerate(body.split(b"\n")[:-1], start=1):
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise StoreCorrupted(f"{path}: line {number} is not valid JSON ({error})") from None
        if not isinstance(event, dict):
            raise StoreCorrupted(f"{path}: line {number} is not a JSON object")
        events.append(event)
    return events


def read(path: str) -> list[Event]:
    """The journal's complete events, oldest first."""
    return parse(_fsops.read_bytes(path), path)


def read_ends(path: str) -> list[Event]:
    """The first and the last complete event (the one event, or none, of a shorter journal).

    All that rebuilding a record needs (``record_from_journal``), read in constant time
    however long the journal is: a block from each end. A line longer than a block at either
    end falls back to reading the whole journal.
    """
    fd = _fsops.open_fd(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        head = _fsops.pread(fd, min(size, _TAIL_BLOCK), 0, path)
        first_end = head.find(b"\n") + 1
        tail_start = max(0, size - _TAIL_BLOCK)
        tail = head if tail_start == 0 else _fsops.pread(fd, size - tail_start, tail_start, path)
        last_end = tail.rfind(b"\n") + 1
        last_start = tail.rfind(b"\n", 0, max(0, last_end - 1)) + 1
        if first_end == 0 or last_end == 0 or (last_start == 0 and tail_start > 0):
            events = read_fd(fd, size, path)
            return events[:1] + events[1:][-1:]
    finally:
        _fsops.close(fd)
    first = parse(head[:first_end], path)
    if tail_start + last_start < first_end:
        return first  # one complete line
    return first + parse(tail[last_start:last_end], path)


def read_fd(fd: int, size: int, path: str) -> list[Event]:
    """The complete events in the first ``size`` bytes of the journal open as ``fd``."""
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = _fsops.pread(fd, size - offset, offset, path)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return parse(b"".join(chunks), path)


def repair_tail(fd: int, path: str) -> int:
    """Cut a torn last line off the journal open as ``fd``; return the resulting size.

    Reads backwards from the end only as far as the last newline, so repair costs the same for
    a long journal as for a short one. The truncation is made durable before any new append.
    """
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - _TAIL_BLOCK)
        block = _fsops.pread(fd, end - start, start, path)
        newline = block.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    else:
        keep = 0
    if keep != size:
        _fsops.truncate(fd, keep, path)
        _fsops.fsync(fd, path)
    return keep
