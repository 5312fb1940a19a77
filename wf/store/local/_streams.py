"""Byte streams: per run and stream, an append-only data file and an index of chunk ends.

Files (flat in the run directory, so the run's one watch sees them), ``<key>`` being a hash of
the stream name (which may be any string):

* ``<key>.name``: the stream's name, written atomically before anything else;
* ``<key>.data``: the chunks' bytes, back to back;
* ``<key>.idx``: one 8-byte big-endian end offset per chunk, so a chunk count is a file size
  and reading from chunk ``n`` is two ``pread`` calls;
* ``<key>.closed``: present once the stream is finished.

Only the lease holder writes. A chunk is durable when ``write_chunk`` returns (both files join
the group commit). Its index entry is what makes it exist, so writing a chunk twice (a replayed
step) is a no-op, and a crash between the two writes leaves at most an unindexed tail of data,
which the next writer cuts off. Readers trust an index entry only if the data reaches its end,
and only if the index still holds it once they read the data (that writer's repair may have cut
it and written new chunks over its bytes meanwhile: see ``load``).
"""

from __future__ import annotations

import dataclasses
import errno
import os

from wf._exceptions import StoreCorrupted
from wf.store._faults import Faults
from wf.store.local import _atomic, _fsops
from wf.store.local._layout import stream_key

_ENTRY = 8
_APPEND = os.O_RDWR | os.O_CREAT | os.O_APPEND


def _paths(run_dir: str, stream: str) -> tuple[str, str, str, str]:
    base = os.path.join(run_dir, stream_key(stream))
    return base + ".name", base + ".data", base + ".idx", base + ".closed"


def _ends(raw: bytes) -> list[int]:
    usable = len(raw) - len(raw) % _ENTRY
    return [int.from_bytes(raw[i : i + _ENTRY], "big") for i in range(0, usable, _ENTRY)]


class StreamWriter:
    """The lease holder's handle on one stream (opened on first use, repaired on open)."""

    def __init__(self, run_dir: str, stream: str) -> None:
        name_path, self.data_path, self.idx_path, self.closed_path = _paths(run_dir, stream)
        created = False
        if not os.path.exists(name_path):
            _atomic.replace(run_dir, os.path.basename(name_path), stream.encode(), sync_dir=False)
            created = True
        self.data_fd = _fsops.open_fd(self.data_path, _APPEND)
        try:
            self.idx_fd = _fsops.open_fd(self.idx_path, _APPEND)
        except BaseException:
            _fsops.close(self.data_fd)
            raise
        if created:
            _fsops.fsync_dir(run_dir)
        self.count, self.size = self._repair()

    def _repair(self) -> tuple[int, int]:
        """Drop what a crash left half-written; return (chunk count, data size)."""
        idx_size = os.fstat(self.idx_fd).st_size
        data_size = os.fstat(self.data_fd).st_size
        ends = _ends(_fsops.pread(self.idx_fd, idx_size, 0, self.idx_path))
        while ends and ends[-1] > data_size:
            ends.pop()  # the index entry reached the disk, its data did not
        keep_idx, keep_data = len(ends) * _ENTRY, (ends[-1] if ends else 0)
        if keep_idx != idx_size:
            _fsops.truncate(self.idx_fd, keep_idx, self.idx_path)
            _fsops.fsync(self.idx_fd, self.idx_path)
        if keep_data != data_size:
            _fsops.truncate(self.data_fd, keep_data, self.data_path)
            _fsops.fsync(self.data_fd, self.data_path)
        return len(ends), keep_data

    def write(self, data: bytes) -> None:
        """Write the next chunk (the caller then commits both descriptors)."""
        end = self.size + len(data)
        try:
            _fsops.write_all(self.data_fd, data, self.data_path)
            _fsops.write_all(self.idx_fd, end.to_bytes(_ENTRY, "big"), self.idx_path)
        except BaseException:
            # Leave no partial chunk behind for the next write to build on.
            self.count, self.size = self._repair()
            raise
        self.count += 1
        self.size = end

    def close(self, run_dir: str, chunks: int) -> None:
        """Mark the stream finished (durably)."""
        if not os.path.exists(self.closed_path):
            marker = os.path.basename(self.closed_path)
            _atomic.replace(run_dir, marker, str(chunks).encode())

    def release(self) -> None:
        """Close the descriptors (after their last commit)."""
        _fsops.close(self.data_fd)
        _fsops.close(self.idx_fd)


MOST_CHUNKS = 4096
"""The chunks a bounded read returns at most (its index read is 32 KB then)."""


@dataclasses.dataclass(frozen=True)
class Span:
    """Where a read's chunks are: the data file's bytes ``begin`` to ``ends[-1]``, cut at
    ``ends``; and whether the stream was closed (read before the index: see ``locate``).
    ``idx_path`` and ``at`` (the byte offset of ``ends[0]``'s entry, or of ``begin``'s when
    ``begin`` came from an entry) let ``load`` check the index still says so."""

    data_path: str
    begin: int
    ends: list[int]
    closed: bool
    idx_path: str = ""
    at: int = 0
    anchored: bool = False

    @property
    def size(self) -> int:
        """The bytes to read (at most: see ``load``)."""
        return self.ends[-1] - self.begin if self.ends else 0


def locate(run_dir: str, stream: str, start: int, max_bytes: int | None = None) -> Span:
    """Where the chunks from index ``start`` on are, a batch of them with ``max_bytes`` (the
    first, then the next while within ``max_bytes``, at most ``MOST_CHUNKS``): their index
    alone is read, so this is cheap whatever they hold."""
    _, data_path, idx_path, closed_path = _paths(run_dir, stream)
    # Closed is read first: once it is seen, every chunk was durable before it, so the index
    # read next holds them all.
    closed = os.path.exists(closed_path)
    try:
        idx_fd = _fsops.open_fd(idx_path, os.O_RDONLY, allow=(errno.ENOENT,))
    except FileNotFoundError:
        return Span(data_path, 0, [], closed)
    try:
        first = max(0, start - 1)
        idx_size = os.fstat(idx_fd).st_size
        offset = first * _ENTRY
        if offset >= idx_size:
            return Span(data_path, 0, [], closed)
        length = idx_size - offset
        if max_bytes is not None:  # the entry before ``start`` (its begin) and the batch's
            length = min(length, (MOST_CHUNKS + 1) * _ENTRY)
        ends = _ends(_fsops.pread(idx_fd, length, offset, idx_path))
    finally:
        _fsops.close(idx_fd)
    anchored = start > 0 and bool(ends)
    begin = ends.pop(0) if anchored else 0
    if max_bytes is not None:
        ends = ends[:MOST_CHUNKS]
        fit = 1
        while fit < len(ends) and ends[fit] - begin <= max_bytes:
            fit += 1
        ends = ends[:fit]
    return Span(data_path, begin, ends, closed, idx_path, offset, anchored)


def load(span: Span) -> tuple[list[bytes], bool]:
    """The chunks ``span`` locates, but those whose data did not reach the disk (the data
    file only grows under the others: a writer's repair cuts only what no entry reached);
    and whether they are all it locates. A new writer's repair may cut an entry whose data
    did not reach the disk, and write new chunks over its bytes, between ``locate`` and
    this read: the index is read again after the data, and only the chunks whose entries
    (and ``begin``'s) it still holds are returned, with False (read again from ``locate``)."""
    if not span.ends:
        return [], True
    data_fd = _fsops.open_fd(span.data_path, os.O_RDONLY)
    try:
        data_size = os.fstat(data_fd).st_size
        ends = [end for end in span.ends if end <= data_size]
        if not ends:
            return [], True
        blob = _fsops.pread(data_fd, ends[-1] - span.begin, span.begin, span.data_path)
    finally:
        _fsops.close(data_fd)
    kept = _still_indexed(span, ends)
    whole = kept == len(ends)
    if not whole:
        ends = ends[:kept]
        blob = blob[: ends[-1] - span.begin] if ends else b""
    if not ends:
        return [], whole
    if len(ends) == 1:
        return [blob], whole  # no copy: a big chunk is read alone
    chunks, begin = [], span.begin
    view = memoryview(blob)
    for end in ends:
        chunks.append(bytes(view[begin - span.begin : end - span.begin]))
        begin = end
    return chunks, whole


def _still_indexed(span: Span, ends: list[int]) -> int:
    """How many of ``ends`` (the first of ``span.ends``) the index still holds, as read
    again now: 0 when ``begin``'s entry changed."""
    expected = ([span.begin] if span.anchored else []) + ends
    idx_fd = _fsops.open_fd(span.idx_path, os.O_RDONLY)
    try:
        now = _ends(_fsops.pread(idx_fd, len(expected) * _ENTRY, span.at, span.idx_path))
    finally:
        _fsops.close(idx_fd)
    same = 0
    for was, is_now in zip(expected, now, strict=False):
        if was != is_now:
            break
        same += 1
    return max(0, same - 1) if span.anchored else same


RACES = 3
"""The reads a read makes at most while repairs change the index under it (see ``load``)."""


def read(run_dir: str, stream: str, start: int) -> tuple[list[bytes], bool]:
    """Chunks from index ``start`` on, and whether the stream is closed."""
    for _ in range(RACES):
        span = locate(run_dir, stream, start)
        chunks, whole = load(span)
        if whole:
            return chunks, span.closed
    return chunks, False  # what is sure: the chunks the index held before and after


def list_streams(run_dir: str, faults: Faults, run_id: str) -> dict[str, tuple[int, bool]]:
    """Stream name -> (chunk count, closed). A stream whose files are damaged is left out and
    noted in ``faults``: the run and its other streams still read. Any other error (a disk
    that failed this once, a bug) goes on up: it says nothing of the stream."""
    out: dict[str, tuple[int, bool]] = {}
    for entry in sorted(_fsops.listdir(run_dir)):
        if not (entry.startswith("s-") and entry.endswith(".name")):
            continue
        name_path = os.path.join(run_dir, entry)
        key = entry.removesuffix(".name")
        try:
            found = _one(run_dir, name_path, key)
        except StoreCorrupted as error:
            # Where: the stream's files (``<key>.*``), whichever of them is damaged.
            faults.note("stream", f"{run_id}/{key}", name_path.removesuffix(".name"), error)
            continue
        if found is not None:
            out[found[0]] = found[1]
    return out


def _one(run_dir: str, name_path: str, key: str) -> tuple[str, tuple[int, bool]] | None:
    """One stream's name and (chunk count, closed); None when its name file went meanwhile."""
    try:
        name = _fsops.read_bytes(name_path, allow=(errno.ENOENT,))
    except FileNotFoundError:
        return None
    try:
        stream = name.decode()
    except UnicodeDecodeError as error:
        raise StoreCorrupted(f"{name_path}: the stream's name is not UTF-8 ({error})") from None
    if stream_key(stream) != key:
        # Its name would point at another stream's files (one copied over another's).
        raise StoreCorrupted(f"{name_path}: names stream {stream!r}, whose files are not these")
    return stream, info(run_dir, stream)


def info(run_dir: str, stream: str) -> tuple[int, bool]:
    """One stream's (chunk count, closed), from its chunk files, which are named by its key
    (its name file is not read: a writer needs the count, not the name); ``(0, False)`` for a
    stream not written yet. ``StoreCorrupted`` when they are damaged, ``StoreError`` when
    they cannot be read this time."""
    _, data_path, idx_path, closed_path = _paths(run_dir, stream)
    closed = os.path.exists(closed_path)
    try:
        ends = _ends(_fsops.read_bytes(idx_path, allow=(errno.ENOENT,)))
    except FileNotFoundError:
        return 0, closed
    # 0 when gone; a failed stat is a StoreError; a directory (or a link...) in its place is
    # damage, though the index still counts: no chunk of it could be read, nor the stream closed.
    data_size = _fsops.file_size(data_path)
    # As the writer repairs on open: an entry whose data did not reach the disk is no chunk.
    return sum(1 for end in ends if end <= data_size), closed
