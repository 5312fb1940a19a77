"""The journal file: JSON Lines, one event per line, appended only by the lease holder.

Every append is whole lines, so every append starts on a fresh line. A crash in the middle of a
write can leave a *torn* last line, without its newline: it was never reported durable, so the
next lease holder cuts it off (``repair_tail``) and readers ignore it (it may also be a line
being written right now). Anything else that does not decode is corruption, reported with the
file and line number: wf never guesses which events to skip.

*Slack.* A journal is kept a whole number of ``SLACK_BLOCK`` bytes long, its unused end filled
with NUL bytes, and appends overwrite that slack in place (``pwrite`` at the end of the last
line). Overwriting blocks the file already has makes an append's ``fdatasync`` a data write
alone: an append that grows the file also makes ext4 commit the new size in its journal, which
measured 1.3-1.5x the cost here (docs/store.md, "Journal slack"). Only an append that runs past
the slack grows the file, by whole blocks, so a 10-step run's journal never grows after its
creation, and a long one grows once per ``SLACK_BLOCK`` of events.

JSON never contains a NUL byte (orjson escapes it), so NUL bytes are never part of an event: the
journal's trailing ones are its unused slack. A NUL byte before the last line's newline is what a
torn write leaves when its blocks reached the disk out of order (a lost block reads as zeros). A
torn write is the last one, so when only such damaged lines follow, the journal's content ends
before the first of them, as it does before a torn last line (``content_end``), and the next
lease holder zeroes them (``repair_tail``); a damaged line with a complete line after it is
corruption.

An older wf reads these journals as it always did: its readers stop at the last newline, so
the slack is a torn last line to them, which its lease holder cuts off before appending.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Sequence

import orjson

from wf._exceptions import StoreCorrupted, StoreError
from wf.store._base import Event
from wf.store._decode import loads_paused
from wf.store.local import _fsops

_TAIL_BLOCK = 64 * 1024

SLACK_BLOCK = 4096
"""A journal's length is a multiple of this (the file system's block: no extra disk space)."""

_NUL = b"\0"

_ZEROS = bytes(_TAIL_BLOCK)


def _strip_nul(data: bytes) -> bytes:
    """``data.rstrip(_NUL)``, at C speed when what follows the first NUL byte is all NUL (the
    usual journal: content, then slack). ``bytes.rstrip`` with an argument tests the slack
    byte by byte: 18 µs for the 3.4 KB after a new run's first events, on every lease taken."""
    at = data.find(_NUL)
    if at >= 0 and len(data) - at <= _TAIL_BLOCK and data.endswith(_ZEROS[: len(data) - at]):
        return data[:at]
    return data.rstrip(_NUL)


_LINE = orjson.OPT_APPEND_NEWLINE


def padded(end: int) -> int:
    """The file length that leaves slack after content ending at ``end``."""
    return -(-end // SLACK_BLOCK) * SLACK_BLOCK


def slack(end: int) -> bytes:
    """The NUL bytes that pad content ending at ``end`` to ``padded(end)``."""
    return _NUL * (padded(end) - end)


def encode(events: Sequence[Event], path: str) -> bytes:
    """The lines for ``events``; a non-JSON event is the caller's bug, reported as such."""
    try:
        if len(events) == 1:
            return orjson.dumps(events[0], option=_LINE)
        return b"".join([orjson.dumps(event, option=_LINE) for event in events])
    except TypeError as error:
        raise StoreError(f"cannot append to {path}: event is not JSON ({error})") from None


def parse(data: bytes, path: str) -> list[Event]:
    """Decode journal bytes, ignoring a torn last line and slack; raise ``StoreCorrupted``
    otherwise."""
    return _decode(_complete(data, path), path)


def parse_to_end(data: bytes, path: str) -> tuple[list[Event], int]:
    """``parse``, and where the complete lines it read end (``content_end``; ``_tails.Parse``)."""
    body = _complete(data, path)
    return _decode(body, path), len(body)


def first(data: bytes) -> Event | None:
    """The first event of journal bytes, read from its first line alone (what follows may be
    damaged); None when that line is incomplete or is no JSON object."""
    newline = data.find(b"\n")
    if newline < 0:
        return None
    try:
        event = orjson.loads(data[:newline])
    except orjson.JSONDecodeError:
        return None  # a damaged line, NUL bytes of a torn write among them
    return event if isinstance(event, dict) else None


def _complete(data: bytes, path: str) -> bytes:
    """The complete lines of journal bytes: without slack, a torn last line or damaged ones."""
    if _NUL in data:
        data = _strip_nul(data)  # the unused slack: the only NUL bytes of a usual journal
        if _NUL in data:
            data = _visible(data, path)[0]
    return data[: data.rfind(b"\n") + 1]


def _decode(body: bytes, path: str) -> list[Event]:
    if not body:
        return []
    # One decode of the whole journal as a JSON array is much faster than one per line; only
    # when it fails do we go line by line to name the culprit.
    try:
        events = loads_paused(b"[" + body[:-1].replace(b"\n", b",") + b"]")
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


def _visible(data: bytes, path: str) -> tuple[bytes, int]:
    """The complete lines of ``data`` before any damaged one, and the offset in ``data`` where
    the last of them ends: where a lease writes next (see the module's docstring).

    A torn write is the journal's last write, so its remains are the last lines: a damaged
    line followed by an undamaged one is corruption, reported, never cut off.
    """
    start = end = 0
    damaged = 0  # the number of the first damaged line, once one is found
    number = 0
    while (newline := data.find(b"\n", start)) >= 0:
        number += 1
        clean = data.find(_NUL, start, newline) < 0
        start = newline + 1
        if not damaged:
            if clean:
                end = start
                continue
            damaged = number
        elif clean:
            raise StoreCorrupted(
                f"{path}: line {damaged} is damaged (NUL bytes), and complete lines follow it"
            )
    return data[:end], end


def content_end(data: bytes, path: str) -> int:
    """Where the journal whose bytes are ``data`` ends for readers (its last complete line)."""
    if _NUL not in data:
        return data.rfind(b"\n") + 1
    return _visible(data, path)[1]


def written_length(path: str, size: int | None = None) -> int:
    """How far the journal at ``path`` is written (its length less the NUL bytes at its end):
    what an append changes, since appends into the slack leave the file's length as it was.
    Reads the last block, and further back only while blocks are all NUL (a long torn write,
    zeroed by its next lease, can leave more than a block of them); 0 if the journal is gone.
    ``size``: its length as the caller's ``stat`` just found it (a journal grown since reads
    as written up to there: an older answer, which the next look corrects)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        return _written_of(fd, os.fstat(fd).st_size if size is None else size)
    except OSError:
        return 0
    finally:
        os.close(fd)


def _written_of(fd: int, end: int) -> int:
    """``written_length`` of the journal open as ``fd``, looking back from ``end``."""
    while end > 0:
        start = max(0, end - SLACK_BLOCK)
        kept = len(_strip_nul(os.pread(fd, end - start, start)))
        if kept:
            return start + kept
        end = start
    return 0


_ends_read = threading.local()
"""Per thread, the journal ``read_ends`` read last and how far it was written then (its
``written_length``): ``last_written`` hands it out once."""


def last_written(path: str) -> int | None:
    """How far the journal at ``path`` was written when this thread's last ``read_ends`` read
    it (``written_length`` as of that read), if that read was of ``path``; forgotten after
    this call. A caller that looked at the run's files before that read takes it instead of
    reading the journal's tail once more (``LocalStore.get_run``)."""
    last = getattr(_ends_read, "last", None)
    _ends_read.last = None
    return last[1] if last is not None and last[0] == path else None


def read(path: str) -> list[Event]:
    """The journal's complete events, oldest first."""
    return parse(_fsops.read_bytes(path), path)


def read_ends(path: str, *, allow: Collection[int] = ()) -> list[Event]:
    """The first and the last complete event (the one event, or none, of a shorter journal).

    All that rebuilding a record needs (``record_from_journal``), read in constant time
    however long the journal is: a block from each end. A line longer than a block at either
    end falls back to reading the whole journal.
    """
    fd, info = _fsops.open_stat(path, os.O_RDONLY, allow=allow)
    try:
        size = info.st_size
        head = _fsops.pread(fd, min(size, _TAIL_BLOCK), 0, path)
        first_end = head.find(b"\n") + 1
        tail_start = max(0, size - _TAIL_BLOCK)
        tail = head if tail_start == 0 else _fsops.pread(fd, size - tail_start, tail_start, path)
        tail = _strip_nul(tail)
        try:
            written = tail_start + len(tail) if tail else _written_of(fd, tail_start)
        except OSError:
            _ends_read.last = None
        else:
            _ends_read.last = (path, written)
        last_end = tail.rfind(b"\n") + 1
        last_start = tail.rfind(b"\n", 0, max(0, last_end - 1)) + 1
        if (
            first_end == 0
            or last_end == 0
            or (last_start == 0 and tail_start > 0)
            or _NUL in head[:first_end]
            or _NUL in tail[last_start:]
        ):
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
    return parse(_read_prefix(fd, size, path), path)


def _read_prefix(fd: int, size: int, path: str) -> bytes:
    """The first ``size`` bytes of the file open as ``fd`` (fewer if it is shorter)."""
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = _fsops.pread(fd, size - offset, offset, path)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def repair_tail(fd: int, path: str, size: int | None = None) -> tuple[int, int]:
    """Make the journal open as ``fd`` end with its last complete line: zero what lies past it
    (a torn write's remains), durably, before any new append. Returns where the content ends
    (where the next append goes) and the file's length. ``size``: the file's length from an
    ``fstat`` the caller took with the lock held (else it is taken here).

    Reads one block from the end in the usual case (content, then slack), so repair costs the
    same for a long journal as for a short one; only a journal whose end is not clean lines
    then slack (a crash mid-write) is read whole.
    """
    keep, length, _head = _repair(fd, path, size)
    return keep, length


def read_repaired(fd: int, path: str, size: int | None = None) -> tuple[bytes, int, int]:
    """``repair_tail``, and the journal's content (its first ``keep`` bytes: complete lines).

    A journal shorter than the block ``repair_tail`` reads from its end (nearly every one) was
    read whole by that read: its content is taken from it, not read again."""
    keep, length, head = _repair(fd, path, size)
    if head is None:
        head = _read_prefix(fd, keep, path)
    return head[:keep], keep, length


def _repair(fd: int, path: str, size: int | None) -> tuple[int, int, bytes | None]:
    """``repair_tail``'s work; also what was read from the start of the file, if the reads
    covered it (None otherwise): its first ``keep`` bytes are the content."""
    if size is None:
        size = os.fstat(fd).st_size
    start = max(0, size - _TAIL_BLOCK)
    tail = _strip_nul(_fsops.pread(fd, size - start, start, path))
    head = tail if start == 0 else None
    last = tail[tail.rfind(b"\n", 0, len(tail) - 1) + 1 :]
    if tail.endswith(b"\n") and _NUL not in last:
        keep = written = start + len(tail)  # whole lines, then slack: nothing to repair
    elif _NUL not in tail and (b"\n" in tail or start == 0):
        keep, written = start + tail.rfind(b"\n") + 1, start + len(tail)  # a torn last line
    else:
        whole = head = _strip_nul(_fsops.pread(fd, size, 0, path))
        written = len(whole)
        try:
            keep = content_end(whole, path)
        except StoreCorrupted:
            # Damage before complete lines: reading reports it, and only a torn last line
            # (after the last newline) is cut, as in any journal.
            keep = whole.rfind(b"\n") + 1
    if written > keep:
        if written == size and _NUL not in tail:
            # A journal without slack (an older wf's): cut the torn bytes off, as it did.
            _fsops.truncate(fd, keep, path)
            _fsops.fsync(fd, path)
            return keep, keep, head
        _fsops.write_all(fd, _NUL * (written - keep), path, keep)
        _fsops.fdatasync(fd, path)
    return keep, size, head
