"""Packed runs: finished runs moved out of their directories into append-only segment files.

::

    segments/<n>.jsonl      one line per packed run, appended only (``n``: 8 digits, the
                            newest is the one appended to until it holds ``SEGMENT_LIMIT``)
    segments/<n>.dead       how many bytes of ``<n>.jsonl`` no run points at any more (one
                            number per line, appended; a hint for ``reclaim``)
    segments/<n>.end        where ``<n>.jsonl`` ended after its last append (20 digits; a
                            hint, never fsynced): a segment shorter than that was cut short
    segments/<n>.damaged    ``<n>.jsonl`` is damaged: never rewritten (``keep``; why, one
                            line), so its runs' locators still point at it after a restore
    segments/lock           flock'ed by whoever packs, unpacks, deletes a packed run or
                            rewrites a segment
    segments/scan.json      the index buckets a compaction pass found nothing more to pack
                            in, by their modification time (a hint, never fsynced)
    packed/<run_id>         the run's locator: a symbolic link whose *target* is
                            ``<n>.<offset>.<length>`` (never a path, never followed: read
                            with ``readlink``; a fast symlink keeps it in its inode, no block)

A line is ``{"id": <run id>, "v": 1, "z": <base64>}``: ``z`` is a zlib stream (with its
checksum) of the payload, compressed against ``DICTIONARY`` (version ``v``), which holds the
words every journal repeats, so a small run's line is a few hundred bytes. The payload is a
JSON header line ``{"r": <record bytes or -1>, "j": <journal bytes>, "l": <log bytes>}`` then
those bytes: the run's ``run.json`` (absent: rebuilt from the journal, as for a directory),
its journal's content (no slack) and its step logs, byte for byte.

Packing a run (``_compact``) appends its line (fsynced), then makes its locator (the
``packed/`` directory fsynced), then removes its directory: at every point in between the run
has a directory, which wins over a locator (readers look for the directory first). Unpacking
does the reverse: the directory is made whole in ``tmp/`` and renamed into ``runs/`` (fsynced),
then the locator goes. A crash leaves a run with both, never with neither; ``wf store verify``
says so and removes the locator; so does the next pack or delete of the run.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import functools
import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from wf._exceptions import StoreCorrupted, StoreError
from wf.store._base import record_from_journal
from wf.store._faults import no_space
from wf.store.local import _fsops, _journal, _records, _waitlock
from wf.store.local._layout import damage, run_present

SEGMENTS_DIR = "segments"
PACKED_DIR = "packed"
SEGMENT_LIMIT = 8 * 1024 * 1024
"""A segment is appended to until it holds this many bytes; then a new one starts. Small
enough that rewriting one (``reclaim``) is a short pause, large enough that a store of a
million runs has a few dozen."""

LINE_LIMIT = 4 * 1024 * 1024
"""A run whose line would be longer than this stays a directory (its reads stay partial)."""

RECLAIM_AT = 0.5
"""A segment more than this fraction dead is rewritten (its live lines moved) by ``reclaim``."""

DICTIONARY = (
    b'"error":null,"created_at":1700000000.000000,"updated_at":1700000000.000000,'
    b'"wake_at":null,"waiting_for":null,"parent_id":null,"root_id":null,"deployment":null,'
    b'"code_hash":"0123456789ab","resumes":0,"cancel_requested":false,"priority":0,'
    b'"group":null,"queue":null,"attempt":1,"max_attempts":1,"max_recoveries":null,'
    b'"limits":null,"trace":null,"schedule_id":null,"retention":null,"by_name":null,"seq":1}}\n'
    b'{"type":"hook_created","ts":1700000000.000000,"op":0,"token":"'
    b'{"type":"value_recorded","ts":1700000000.000000,"op":0,"value":'
    b'{"type":"step_failed","ts":1700000000.000000,"op":0,"name":"step","attempt":1,'
    b'"error":{"type":"ValueError","message":"","module":"builtins","traceback":"'
    b'{"type":"run_failed","ts":1700000000.000000,"error":{"type":"'
    b'{"type":"run_cancelled","ts":1700000000.000000}\n'
    b'{"type":"sleep_started","ts":1700000000.000000,"op":0,"until":1700000000.000000}\n'
    b'{"ts":1700000000.000000,"op":0,"step":"step","attempt":1,"stream":"stdout","text":"'
    b'{"type":"run_started","ts":1700000000.000000,"workflow":"module:flow",'
    b'"input":{"args":[],"kwargs":{}},"record":{"id":"wrun_01M8YV1A9Q7VMMF9JKMV0SXNE6",'
    b'"workflow":"module:flow","status":"pending","target":"module:flow","output":null,'
    b'"error":null,"created_at":1700000000.000000,"updated_at":1700000000.000000,'
    b'"wake_at":null,"waiting_for":null,"parent_id":null,"root_id":null,"deployment":null,'
    b'"code_hash":"0123456789ab","resumes":0,"cancel_requested":false,"priority":0,'
    b'"group":null,"queue":null,"attempt":1,"max_attempts":1,"max_recoveries":null,'
    b'"limits":null,"trace":null,"schedule_id":null,"retention":null,"by_name":null,"seq":1}}\n'
    b'{"type":"run_attempt","ts":1700000000.000000,"attempt":1}\n'
    b'{"type":"step_started","ts":1700000000.000000,"op":0,"name":"step","attempt":1,'
    b'"args":{"args":[0],"kwargs":{}}}\n'
    b'{"type":"step_completed","ts":1700000000.000000,"op":0,"name":"step","attempt":1,'
    b'"result":1}\n'
    b'{"type":"step_started","ts":1700000000.000000,"op":1,"name":"step","attempt":1,'
    b'"args":{"args":[1],"kwargs":{}}}\n'
    b'{"type":"step_completed","ts":1700000000.000000,"op":1,"name":"step","attempt":1,'
    b'"result":2}\n'
    b'{"type":"run_completed","ts":1700000000.000000,"output":3}\n'
)
"""Version 1 of the preset dictionary lines are compressed against (``v`` in a line). Part of
the format: never changed, only added to under a new version. The most frequent words come
last (zlib finds nearer matches cheaper)."""

_DICTIONARIES = {1: DICTIONARY}
_VERSION = 1


@dataclass(frozen=True)
class Loc:
    """Where a packed run's line is: segment number, byte offset, length (newline included)."""

    segment: int
    offset: int
    length: int

    def target(self) -> str:
        """The locator's link target."""
        return f"{self.segment}.{self.offset}.{self.length}"

    @classmethod
    def parse(cls, target: str) -> Loc | None:
        """A link target made by ``target``, or None."""
        parts = target.split(".")
        # ASCII digits only (int() refuses most other digits), and few enough for a file offset.
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 18 for p in parts):
            return None
        return cls(int(parts[0]), int(parts[1]), int(parts[2]))


@dataclass
class Packed:
    """A packed run's files, as they were in its directory."""

    record: bytes | None
    """``run.json`` (None: the run had none; its record is rebuilt from the journal)."""
    journal: bytes
    """The journal's content (complete lines, no slack)."""
    logs: bytes

    def raw(self, where: str) -> dict[str, Any]:
        """The stored JSON of the run's record (``_records.read_raw`` of a directory)."""
        if self.record is not None:
            with contextlib.suppress(StoreCorrupted):
                return _records.decode(self.record, where)
        events = _journal.parse(self.journal, where)
        record = record_from_journal(events[:1] + events[1:][-1:])
        if record is None:
            raise StoreCorrupted(f"{where}: no record, and the journal cannot rebuild it")
        return record.to_json()


def encode(run_id: str, packed: Packed) -> bytes:
    """The segment line of a run."""
    record = packed.record if packed.record is not None else b""
    header = orjson.dumps(
        {
            "r": len(record) if packed.record is not None else -1,
            "j": len(packed.journal),
            "l": len(packed.logs),
        }
    )
    body = header + b"\n" + record + packed.journal + packed.logs
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
    z = squeeze.compress(body) + squeeze.flush()
    return orjson.dumps({"id": run_id, "v": _VERSION, "z": base64.b64encode(z).decode()}) + b"\n"


def decode(line: bytes, where: str) -> tuple[str, Packed]:
    """The run id and files a segment line holds; ``StoreCorrupted`` naming ``where``."""
    try:
        data = orjson.loads(line)
        run_id, version, z = data["id"], data["v"], data["z"]
        dictionary = _DICTIONARIES[version]
        unsqueeze = zlib.decompressobj(15, dictionary)
        body = unsqueeze.decompress(base64.b64decode(z, validate=True)) + unsqueeze.flush()
        if not unsqueeze.eof:
            raise ValueError("the compressed payload is cut short")
        head, _, rest = body.partition(b"\n")
        sizes = orjson.loads(head)
        r, j, n = int(sizes["r"]), int(sizes["j"]), int(sizes["l"])
        if max(r, 0) + j + n != len(rest) or not isinstance(run_id, str):
            raise ValueError("the payload's sizes do not add up")
    except (
        orjson.JSONDecodeError,
        binascii.Error,
        zlib.error,
        KeyError,
        TypeError,
        ValueError,
    ) as error:
        raise StoreCorrupted(f"{where}: not a packed run ({error})") from None
    record = rest[:r] if r >= 0 else None
    start = max(r, 0)
    return run_id, Packed(record, rest[start : start + j], rest[start + j :])


def _line_end(fd: int, size: int, path: str) -> int:
    """Where the last complete line of a segment of ``size`` bytes ends (0: none)."""
    end = size
    while end > 0:
        start = max(end - 65536, 0)
        chunk = _fsops.pread(fd, end - start, start, path)
        at = chunk.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


class Segments:
    """``segments/`` and ``packed/`` of one store."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, SEGMENTS_DIR)
        self.links = os.path.join(root, PACKED_DIR)
        self.runs = os.path.join(root, "runs")
        self._made = False
        """Whether ``segments/`` is known to exist (nothing removes it)."""

    # -- locators --------------------------------------------------------------------------

    def locate(self, run_id: str) -> Loc | None:
        """The packed run's place (``run_id`` validated by the caller), or None."""
        try:
            target = os.readlink(f"{self.links}{os.sep}{run_id}")  # a valid id: one name
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            if error.errno == errno.EINVAL:  # a file, not a link: nothing wf made
                raise StoreCorrupted(
                    f"{os.path.join(self.links, run_id)}: not a packed run's locator"
                ) from None
            raise StoreError(f"cannot read {os.path.join(self.links, run_id)}: {error}") from None
        loc = Loc.parse(target)
        if loc is None:
            raise StoreCorrupted(
                f"{os.path.join(self.links, run_id)}: not a packed run's locator ({target!r})"
            )
        return loc

    def link(self, run_id: str, loc: Loc) -> None:
        """Make (or replace) the run's locator; the caller fsyncs ``packed/``."""
        path = os.path.join(self.links, run_id)
        if _fsops.mkdir(self.links, allow=(errno.EEXIST,)):
            _fsops.fsync_dir(os.path.dirname(self.links))
        temp = os.path.join(self.links, f".{run_id}.{os.getpid()}.{os.urandom(4).hex()}")
        try:
            _fsops._check("link", path)
            os.symlink(loc.target(), temp)
        except OSError as error:
            raise StoreError(f"cannot link {path}: {error.strerror}") from error
        try:
            _fsops.rename(temp, path)
        except BaseException:
            _fsops.unlink(temp)
            raise

    def unlink(self, run_id: str) -> bool:
        """Remove the run's locator; the caller fsyncs ``packed/``."""
        return _fsops.unlink(os.path.join(self.links, run_id))

    def ids(self) -> list[str]:
        """The ids that have a locator (unvalidated: names as found)."""
        return [n for n in _fsops.listdir(self.links) if not n.startswith(".")]

    # -- lines -----------------------------------------------------------------------------

    def path(self, segment: int) -> str:
        """The file of segment ``segment``."""
        return os.path.join(self.dir, f"{segment:08d}.jsonl")

    def numbers(self) -> list[int]:
        """The segments there are, oldest first."""
        out = []
        for name in _fsops.listdir(self.dir):
            stem, dot, ext = name.partition(".")
            if dot and ext == "jsonl" and stem.isascii() and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def read(self, loc: Loc, run_id: str) -> Packed:
        """The packed run's files; ``StoreCorrupted`` if its line is damaged or another's."""
        path = self.path(loc.segment)
        where = f"{path} at byte {loc.offset} (run {run_id})"
        if loc.length > LINE_LIMIT:
            # No line wf writes is longer: the locator is damaged, and reading what it says
            # could take all memory.
            raise StoreCorrupted(
                f"{os.path.join(self.links, run_id)}: not a packed run's locator (a line of "
                f"{loc.length} bytes, over {LINE_LIMIT})"
            )
        try:
            fd = _fsops.open_fd(path, os.O_RDONLY, allow=(errno.ENOENT,))
        except FileNotFoundError:
            raise StoreCorrupted(
                f"{path}: missing (run {run_id} is packed in it: restore it from a backup)"
            ) from None
        try:
            line = _fsops.pread(fd, loc.length, loc.offset, path)
            if len(line) != loc.length:
                size = os.fstat(fd).st_size
        finally:
            _fsops.close(fd)
        if len(line) != loc.length:
            raise StoreCorrupted(
                f"{path}: cut short at byte {size} (run {run_id} is packed at byte "
                f"{loc.offset}, {loc.length} bytes long)"
            )
        if not line.endswith(b"\n"):
            raise StoreCorrupted(f"{where}: not the end of a line (the line is overwritten)")
        found, packed = decode(line, where)
        if found != run_id:
            raise StoreCorrupted(f"{where}: the line holds run {found}")
        return packed

    def append(self, lines: list[bytes]) -> list[Loc]:
        """Append the lines to the newest segment (a new one when it is full) and make them
        durable; their places, in order. The caller holds ``lock``."""
        _fsops.mkdir(self.dir, allow=(errno.EEXIST,))
        numbers = self.numbers()
        segment = numbers[-1] if numbers else 1
        path = self.path(segment)
        try:
            found = os.lstat(path)
            size = found.st_size
        except FileNotFoundError:
            size = 0
        else:
            if not stat.S_ISREG(found.st_mode):
                size = SEGMENT_LIMIT  # a directory or a link: damage verify names; skip it
        if size >= SEGMENT_LIMIT:
            segment, size = segment + 1, 0
            path = self.path(segment)
        new = size == 0
        try:
            fd, size = self._open_end(path, segment)
        except _Lost as lost:
            # Runs point past where it ends: its lines there are lost (or a backup has them),
            # and what is appended at that offset would be read as theirs. Kept as it is.
            self.keep(segment, f"{lost}; packing goes on in a new segment after it")
            segment, new = segment + 1, True
            path = self.path(segment)
            fd, size = self._open_end(path, segment)
        except StoreError as error:
            if new:
                raise  # no segment can be made here: the directory's fault, not a segment's
            # It cannot be opened or read (EACCES, EIO): its runs are verify's to name, and
            # packing goes on in the next segment (which is then the newest: said once).
            damage(f"{error}: packing goes on in a new segment after it")
            segment, new = segment + 1, True
            path = self.path(segment)
            fd, size = self._open_end(path, segment)
        try:
            out = []
            offset = size
            for line in lines:
                out.append(Loc(segment, offset, len(line)))
                offset += len(line)
            try:
                _fsops.write_all(fd, b"".join(lines), path, size)
                _fsops.fsync(fd, path)
            except BaseException:
                # A write cut short (ENOSPC, EIO) leaves part of the lines, which nothing
                # points at: they go at once (a full disk gets its room back), or the next
                # append's repair above takes them.
                with contextlib.suppress(OSError, StoreError):
                    _fsops.truncate(fd, size, path)
                raise
        finally:
            _fsops.close(fd)
        self._ended(segment, offset)
        if new:
            _fsops.fsync_dir(self.dir)
        return out

    def recount(self) -> None:
        """Set each segment's dead count to its bytes no locator points at: what a crash
        left uncounted (a pack's lines appended but not yet pointed at, a count lost) is then
        reclaimed as any dead line. The caller holds ``lock`` (a pack in progress has lines no
        locator points at yet)."""
        live: dict[int, int] = {}
        for run_id in self.ids():
            try:
                loc = self.locate(run_id)
            except StoreError:
                continue  # damage verify names; its line, if any, counts dead
            if loc is not None:
                live[loc.segment] = live.get(loc.segment, 0) + loc.length
        for segment in self.numbers():
            try:
                size = os.stat(self.path(segment)).st_size
            except OSError:
                continue  # gone, or unreadable: verify names it
            dead = max(size - live.get(segment, 0), 0)
            if dead != self.dead(segment):
                self._recount(segment, dead)

    def _open_end(self, path: str, segment: int) -> tuple[int, int]:
        """A segment opened to append to, and where the next line starts; ``_Lost`` if it
        ends mid-line under runs that point past its last whole line."""
        fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
        try:
            size = os.fstat(fd).st_size
            # A torn line a crash left at the end (no newline) is never pointed at (a line is
            # pointed at only once fsynced whole): it goes, or no count would know its bytes.
            # Unless a run points there: then the segment was cut short after its lines were
            # durable (``_repoint``), which a segment shorter than its last append left it
            # also says (cut at a line's end).
            end = size
            if size and _fsops.pread(fd, 1, size - 1, path) != b"\n":
                end = _line_end(fd, size, path)
            if end < size or size < self.end(segment):
                self._repoint(segment, end, size, path)
            if end < size:
                _fsops.truncate(fd, end, path)
                size = end
        except BaseException:
            _fsops.close(fd)
            raise
        return fd, size

    def _repoint(self, segment: int, end: int, size: int, path: str) -> None:
        """Before a segment that ends mid-line is cut back to ``end``, its last whole line,
        and appended to: the runs whose locator points past ``end`` lost their line. Every
        locator is read for that (a ``readlink`` each, only when a segment ends mid-line:
        after a crash mid-append, where none points there). A run that still has its
        directory (a pack cut short before removing it) loses nothing: its locator goes, and
        it is a directory again. ``_Lost`` if any other run points there. Also for a
        segment that ends at a line's end, yet short of where its last append left it."""
        past = sorted(
            (loc.offset, run_id)
            for run_id, loc in self._pointers()
            if loc.segment == segment and loc.offset + loc.length > end
        )
        if not past:
            return
        lost = []
        for _, run_id in past:
            if run_present(os.path.join(self.runs, run_id)):
                self.unlink(run_id)
            else:
                lost.append(run_id)
        if len(lost) < len(past):
            _fsops.fsync_dir(self.links)
        if lost:
            named = ", ".join(lost[:3]) + (", ..." if len(lost) > 3 else "")
            raise _Lost(
                f"{path}: cut short at byte {size}: the {len(lost)} packed run(s) ({named}) "
                "past it are lost"
            )

    def end(self, segment: int) -> int:
        """Where the segment ended after its last append (``<n>.end``; 0: not known)."""
        try:
            raw = _fsops.read_bytes(self._end_path(segment), allow=(errno.ENOENT,))
        except (FileNotFoundError, StoreError):
            return 0
        number, end = raw[:20], raw[20:]
        return int(number) if number.isascii() and number.isdigit() and end == b"\n" else 0

    def _ended(self, segment: int, end: int) -> None:
        """Note where an append left the segment: a hint, overwritten in place and never
        fsynced. Lost or torn, it says nothing (a segment then cut at a line's end goes
        unnoticed, as without it); one that says more than the segment holds only costs a
        read of the locators, which decide."""
        path = self._end_path(segment)
        with contextlib.suppress(StoreError):
            fd = _fsops.open_fd(path, os.O_WRONLY | os.O_CREAT)
            try:
                _fsops.write_all(fd, f"{end:020d}\n".encode(), path, 0)
            finally:
                _fsops.close(fd)

    def _end_path(self, segment: int) -> str:
        return os.path.join(self.dir, f"{segment:08d}.end")

    def lines(self, segment: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, line)`` of every complete line of a segment (a torn last one is not)."""
        path = self.path(segment)
        try:
            data = _fsops.read_bytes(path, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            yield start, data[start : end + 1]
            start = end + 1

    # -- dead bytes and reclaiming ---------------------------------------------------------

    def bury(self, locs: list[Loc]) -> None:
        """Count the lines at ``locs`` dead (their runs unpacked or deleted): a hint, not
        fsynced (a lost count only delays a segment's rewrite; ``reclaim`` counts again
        before it rewrites)."""
        by_segment: dict[int, int] = {}
        for loc in locs:
            by_segment[loc.segment] = by_segment.get(loc.segment, 0) + loc.length
        for segment, dead in by_segment.items():
            path = os.path.join(self.dir, f"{segment:08d}.dead")
            try:
                fd = _fsops.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                try:
                    _fsops.write_all(fd, f"{dead}\n".encode(), path)
                finally:
                    _fsops.close(fd)
            except StoreError as error:
                if not no_space(error):
                    raise
                # A full disk: the count is lost, as after a crash (``wf store verify``
                # counts again); what was buried (a deletion, an unpack) is done.

    def dead(self, segment: int) -> int:
        """The dead bytes of a segment, as counted by ``bury``."""
        path = os.path.join(self.dir, f"{segment:08d}.dead")
        try:
            raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return 0
        return sum(int(n) for n in raw.split() if n.isascii() and n.isdigit())

    def live(self, segment: int) -> list[tuple[str, Loc, bytes]]:
        """The lines of a segment some locator points at: ``(run id, place, line)``."""
        out = []
        for offset, line in self.lines(segment):
            try:
                run_id = orjson.loads(line)["id"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # damaged: if a run points at it, verify says so; nothing to move
            if not isinstance(run_id, str) or "/" in run_id or run_id.startswith("."):
                continue
            here = Loc(segment, offset, len(line))
            with contextlib.suppress(StoreError):
                if self.locate(run_id) == here:
                    out.append((run_id, here, line))
        return out

    def reclaim(self, at: float = RECLAIM_AT) -> int:
        """Rewrite every segment more than ``at`` dead: its live lines are appended to the
        newest segment and their locators moved, then it is removed. The newest segment goes
        only once wholly dead, and an empty one numbered after it takes its place first: a
        segment number is never given twice. Returns the bytes freed. The caller holds
        ``lock``.

        Crash-safe in order: the moved lines are durable before any locator points at them,
        the locators (``packed/`` fsynced) before the old segment goes."""
        freed = 0
        numbers = self.numbers()
        pointing: dict[int, set[Loc]] | None = None  # every locator's place, read once
        for segment in numbers:
            newest = segment == numbers[-1]
            path = self.path(segment)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue
            dead = self.dead(segment)
            if size == 0 or (dead < size if newest else dead <= size * at):
                continue
            if os.path.lexists(self._kept(segment)):
                continue  # damaged: left for a restore or a repair (``keep``)
            try:
                live = self.live(segment)
            except StoreError as error:  # EACCES, EIO: nothing to rewrite it from
                self.keep(segment, str(error))
                continue
            if sum(loc.length for _, loc, _ in live) > size * at or (newest and live):
                # The hint overcounted (lines counted twice after a crash): recount it.
                self._recount(segment, size - sum(loc.length for _, loc, _ in live))
                continue
            points: set[Loc] = set()
            if (
                self._cut(path, size)
                or size < self.end(segment)
                or dead > size - sum(loc.length for _, loc, _ in live)
            ):
                # A sign some run points past its end (a file ends mid-line only when cut
                # short, or a crash tore its last line; shorter than its last append left
                # it: cut short): every locator read to be sure, which a sound segment never
                # costs.
                if pointing is None:
                    pointing = self._pointing()
                points = pointing.get(segment, set())
            why = _damage(path, live, points)
            if why is not None:
                self.keep(segment, why)
                continue
            if newest:
                fd = _fsops.open_fd(self.path(segment + 1), os.O_WRONLY | os.O_CREAT)
                _fsops.close(fd)
                _fsops.fsync_dir(self.dir)
            elif live:
                try:
                    places = self.append([line for _, _, line in live])
                except StoreError as error:
                    if not no_space(error):
                        raise
                    continue  # no room to move its live lines: a later pass, with room
                for (run_id, _, _), loc in zip(live, places, strict=True):
                    self.link(run_id, loc)
                _fsops.fsync_dir(self.links)
            _fsops.unlink(self._end_path(segment))  # first: a crash leaves no hint behind
            _fsops.unlink(path)
            _fsops.unlink(os.path.join(self.dir, f"{segment:08d}.dead"))
            _fsops.fsync_dir(self.dir)
            freed += size
        return freed

    @staticmethod
    def _cut(path: str, size: int) -> bool:
        """Whether the segment ends mid-line."""
        fd = _fsops.open_fd(path, os.O_RDONLY)
        try:
            return _fsops.pread(fd, 1, size - 1, path) != b"\n"
        finally:
            _fsops.close(fd)

    def _pointing(self) -> dict[int, set[Loc]]:
        """Every locator's place, by segment: a read of each link in ``packed/`` (7.5 us each
        at a load of 6), done only when a segment about to be rewritten looks cut short."""
        out: dict[int, set[Loc]] = {}
        for _, loc in self._pointers():
            out.setdefault(loc.segment, set()).add(loc)
        return out

    def _pointers(self) -> Iterator[tuple[str, Loc]]:
        """Every readable locator: ``(run id, place)``."""
        for run_id in self.ids():
            with contextlib.suppress(StoreError):
                loc = self.locate(run_id)
                if loc is not None:
                    yield run_id, loc

    def _kept(self, segment: int) -> str:
        return os.path.join(self.dir, f"{segment:08d}.damaged")

    def keep(self, segment: int, why: str) -> None:
        """Mark a damaged segment never to be rewritten (``<n>.damaged``, holding ``why``):
        its runs' locators point into it, so a restore from a backup or a repair finds it
        where they point. Said once, when marked; ``wf store verify`` removes the mark once
        every run in the segment reads."""
        with contextlib.suppress(StoreError):
            from wf.store.local import _atomic

            _atomic.replace(self.dir, os.path.basename(self._kept(segment)), f"{why}\n".encode())
            damage(f"{why}: the segment is kept as it is, not rewritten")

    def unkeep(self, segment: int) -> bool:
        """Remove a segment's ``keep`` mark; whether there was one."""
        return _fsops.unlink(self._kept(segment))

    def kept(self) -> list[int]:
        """The segments marked by ``keep``."""
        return sorted(
            int(name.partition(".")[0])
            for name in _fsops.listdir(self.dir)
            if name.endswith(".damaged") and name.isascii() and name.partition(".")[0].isdigit()
        )

    def _recount(self, segment: int, dead: int) -> None:
        path = os.path.join(self.dir, f"{segment:08d}.dead")
        with contextlib.suppress(StoreError):
            from wf.store.local import _atomic

            _atomic.replace(self.dir, os.path.basename(path), f"{dead}\n".encode())

    # -- the lock --------------------------------------------------------------------------

    LOCK_WHAT = "taken to pack, unpack or delete packed runs"
    """What ``segments/lock`` is for, in the line a long wait for it says."""

    def take(self, *, shared: bool = False, wait: bool = True) -> int | None:
        """``segments/lock`` taken (exclusive, or ``shared`` with other sharers): its
        descriptor, whose close lets it go; None if ``wait`` is off and another process holds
        it. A wait longer than a second is said (``_waitlock``)."""
        if not self._made:
            _fsops.mkdir(self.dir, allow=(errno.EEXIST,))
            self._made = True
        path = os.path.join(self.dir, "lock")
        fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            if wait:
                _waitlock.flock(fd, mode, path, self.LOCK_WHAT)
            else:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            _fsops.close(fd)
            return None
        except BaseException:
            _fsops.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def lock(self, *, wait: bool = True, shared: bool = False) -> Iterator[bool]:
        """Hold ``segments/lock`` (``take``) for the block; yields False if ``wait`` is off
        and another process holds it."""
        fd = self.take(shared=shared, wait=wait)
        try:
            yield fd is not None
        finally:
            if fd is not None:
                _fsops.close(fd)

    def held(self, *, shared: bool = False) -> contextlib.AbstractAsyncContextManager[int]:
        """``lock`` for a coroutine: tried on the loop, waited for in a thread only when
        another process holds it (``_waitlock.held``)."""
        return _waitlock.held(functools.partial(self._take, shared), self.dir)

    def _take(self, shared: bool, wait: bool) -> int | None:
        return self.take(shared=shared, wait=wait)


class _Lost(StoreCorrupted):
    """A segment about to be appended to was cut short under runs that point past its end
    (the message says which). Caught where it is met first; raised again (a stale end hint
    over a missing next segment, after a power cut) it is damage the caller is told of."""


class SegmentsBusy(StoreError):
    """``segments/lock`` is held by another process and the caller, on the event loop, may not
    wait for it there: the coroutine that called it waits (``Segments.held``) and tries again."""


def _damage(path: str, live: list[tuple[str, Loc, bytes]], pointing: set[Loc]) -> str | None:
    """What is wrong with a segment about to be rewritten, or None: a locator pointing into
    it at no line of its run (the segment cut short, or the line overwritten), or a line a
    run points at that does not decode."""
    lost = pointing - {loc for _, loc, _ in live}
    if lost:
        first = min(lost, key=lambda loc: loc.offset)
        return (
            f"{path}: {len(lost)} run(s) point at no line of theirs in it (from byte "
            f"{first.offset}: cut short or overwritten)"
        )
    for run_id, loc, line in live:
        try:
            decode(line, f"{path} at byte {loc.offset} (run {run_id})")
        except StoreCorrupted as error:
            return str(error)
    return None
