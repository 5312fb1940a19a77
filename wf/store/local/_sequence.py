"""The store-wide creation sequence: ``sequence``, the last number given, as 20 digits.

Every run gets the next number when it is created (``RunRecord.seq``): queue entries of equal
priority and due time sort by it, index names start with it (listings are newest-created
first), and a group lane's entries are named by it. A number is read and bumped under an
exclusive ``flock`` on the file, held for a read and a write, so two processes never give the
same number and a run created later always has a larger one, whatever ids or clocks say.

The bump is fsynced before the run counts: inside a creation that fsync is deferred into the
creation's one shared flush (``_fsops.deferred_fsyncs``), like every other file of the run. A
number that went back after a power cut would put a later run ahead of an earlier one.

A file that holds no number (damage: a stray write, a disk error; or empty in a store that
has runs) is rebuilt by the next taker: the numbers in use are read first, without the lock
(in a worker thread for a creation, ``prepare``), from the newest ``index/`` bucket holding
one, ``lanes/``, ``queue/``, the tombstones of deleted runs and the creation log; then, under
the lock, the damaged bytes are kept aside in ``sequence.damaged`` and the
sequence goes on ``REBUILD_GAP`` past the highest, with a warning. It refused every creation of
the store instead (``StoreCorrupted``), for one damaged file of 21 bytes. The gap is what makes
the rebuild safe: a number another process took just before the damage and has not written
anywhere yet is not found, and must not be given again. ``wf store verify`` rebuilds it the
same way (``repair``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import threading
from collections.abc import Iterator

import orjson

from wf._exceptions import StoreCorrupted, StoreError
from wf.store.local import _atomic, _fsops, _waitlock
from wf.store.local._creations import LOG_FILE
from wf.store.local._layout import (
    SEP,
    SEQ_WIDTH,
    SEQUENCE_FILE,
    TOMBSTONES_DIR,
    entry_seq,
    parse_queue_name,
)

log = logging.getLogger("wf.store.local")

DAMAGED_SUFFIX = ".damaged"
"""``sequence.damaged``: the bytes of the last sequence file found damaged (``_rebuild``)."""

REBUILD_GAP = 1_000_000
"""How far past the highest number in use a rebuilt sequence goes on: more than the numbers
all processes together can have taken and not yet written (each creation writes its names at
once), and nothing beside the 10^16 numbers index names hold. Numbers need not be dense."""


class Unnumbered(Exception):
    """The file holds no number, and the taker asked not to scan for the highest in use under
    the lock (a creation: it scans off the loop, ``prepare``, and takes again)."""


class CreationSequence:
    """``<root>/sequence`` of one store (one descriptor, opened on first use)."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, SEQUENCE_FILE)
        self._root = root
        self._fd: int | None = None
        # An ``flock`` on one open file never blocks its own holder: a repair in a worker
        # thread (``verify``, also over the API) and a creation on the loop would both find
        # the damage and both rebuild, the later writing the lower number.
        self._thread_lock = threading.Lock()

    @contextlib.contextmanager
    def _locked(self, why: str) -> Iterator[int]:
        """The descriptor, held by this thread alone and ``flock``ed against other
        processes (and other stores of this one)."""
        with self._thread_lock:
            fd = self._open()
            try:
                _waitlock.flock(fd, fcntl.LOCK_EX, self.path, why)
            except OSError as error:
                raise StoreError(f"cannot lock {self.path}: {error.strerror}") from error
            try:
                yield fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _open(self) -> int:
        if self._fd is None:
            try:
                fd = _fsops.open_fd(
                    self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, allow=(errno.EEXIST,)
                )
                _fsops.fsync_dir(self._root)  # its name, before a number in it counts
            except FileExistsError:
                fd = _fsops.open_fd(self.path, os.O_RDWR)
            self._fd = fd
        return self._fd

    def take(self, found: int | None = None, *, scan: bool = True) -> int:
        """The next number (durable before the caller's run counts, see the module).
        ``found``: the highest number in use, if the caller scanned (``prepare``) because
        the file held none. Not ``scan``: a file that holds none raises ``Unnumbered``
        (nothing written, the lock let go) rather than scan under the lock."""
        return self._bump(0, step=1, found=found, scan=scan)

    def at_least(self, number: int) -> None:
        """Make the last number given at least ``number`` (runs recovered or migrated with
        numbers of their own: later runs must come after them)."""
        self._bump(number, step=0)

    def start_at(self, number: int) -> None:
        """Write ``number`` as the last given, whatever the file holds: only for a store
        whose every run was just numbered by its upgrade (``_migrate``), which makes the
        file. An empty file there is new, not damage (``at_least`` took it for damage:
        a warning, an empty ``sequence.damaged``, numbering a million further on)."""
        with self._locked("taken to start the sequence") as fd:
            self._write(fd, number)

    def _bump(self, floor: int, *, step: int, found: int | None = None, scan: bool = True) -> int:
        # No look at the file before the lock: a healthy file (every creation) is read once,
        # under it; the creation path is told of a damaged one (``Unnumbered``) and scans off
        # the loop (``prepare``), and any other taker finds the damage under the lock and
        # scans there.
        with self._locked("taken to number a new run") as fd:
            last, rebuilt, length = self._read(fd, found, scan)
            number = max(last, floor) + step
            if number != last or rebuilt is not None:
                self._write(fd, number, length)
            if rebuilt is not None:
                log.warning("%s", rebuilt)
            return number

    def close(self) -> None:
        """Close the descriptor."""
        with self._thread_lock:
            if self._fd is not None:
                _fsops.close(self._fd)
                self._fd = None

    def repair(self) -> str | None:
        """Rebuild the file if it is damaged (``wf store verify``); what was done, or None
        when it holds a number."""
        found = self._scan_if_damaged()
        with self._locked("taken to repair it") as fd:
            last, rebuilt, _ = self._read(fd, found)
            if rebuilt is not None:
                self._write(fd, last)  # read under the lock: never below the number on file
            return rebuilt

    def prepare(self) -> int:
        """The highest number in use, for ``take`` to rebuild the file with (called in a
        worker thread, so the scan does not hold up the event loop)."""
        return self._highest_in_use()

    def _scan_if_damaged(self, found: int | None = None) -> int | None:
        """The highest number in use if the file, read without the lock, holds none.

        The scan is made before the lock is taken, so no other taker of the store waits for
        it: if the file still holds no number under the lock, nobody took a number since
        (a taker writes one), so the scan is still the highest in use, and the gap covers
        a number taken in another process and not written anywhere yet."""
        try:
            raw = _fsops.read_bytes(self.path, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return None
        text = raw[:64].strip()
        if text.isascii() and text.isdigit():
            return None
        return self._highest_in_use() if found is None else found

    def _read(
        self, fd: int, found: int | None = None, scan: bool = True
    ) -> tuple[int, str | None, int | None]:
        """``(last number given, None, the file's length)``, or for a damaged file (held under
        the lock) ``(the rebuilt last number, what was done, None)``, the damaged bytes set
        aside. ``found``: the highest number in use, scanned before the lock was taken;
        without it and ``scan``, ``Unnumbered`` for a damaged file. The length is None when
        the read does not tell it (64 bytes or more)."""
        raw = _fsops.pread(fd, 64, 0, self.path)
        text = raw.strip()
        if text.isascii() and text.isdigit():
            return int(text), None, len(raw) if len(raw) < 64 else None
        if found is None and not scan:
            raise Unnumbered(self.path)
        highest = self._highest_in_use() if found is None else found
        if not text and highest == 0:
            return 0, None, None  # made, never written (a taker killed in between), no run yet
        size = os.fstat(fd).st_size
        damaged = _fsops.pread(fd, min(size, 1 << 20), 0, self.path) if size else b""
        _atomic.replace(self._root, SEQUENCE_FILE + DAMAGED_SUFFIX, damaged)
        last = highest + REBUILD_GAP
        what = "empty" if not text else "not a sequence number"
        done = (
            f"{self.path}: {what}; rebuilt past the highest creation number in use ({highest}"
            f" + {REBUILD_GAP}: {last}), the damaged file kept as "
            f"{self.path}{DAMAGED_SUFFIX}"
        )
        return last, done, None

    def _write(self, fd: int, number: int, length: int | None = None) -> None:
        """Write ``number`` over the file (``length``: the file's, if the caller knows it)."""
        data = f"{number:020d}\n".encode()
        _fsops.write_all(fd, data, self.path, 0)
        # A number's length (every creation's case) needs no ``fstat`` to know nothing is left.
        if (length is None or length > len(data)) and os.fstat(fd).st_size > len(data):
            _fsops.truncate(fd, len(data), self.path)  # a longer damaged file's tail
        _fsops.fsync(fd, self.path)

    def _highest_in_use(self) -> int:
        """The highest creation number the store's names and logs carry (0: none).

        ``index/`` is read from its newest bucket back to the first that holds a number:
        buckets are slices of the number, so the highest is in the newest (it walked every
        bucket: 10.7 s on the loop, the lock held, for a million runs). A child's number is
        in its index name too (``children/`` is not read). ``lanes/`` and ``queue/`` hold
        unfinished runs only; the tombstones and the creation log are read a line at a
        time (they were read whole: 205 MB for a million tombstones)."""
        try:
            highest = self._highest_indexed()
            for _folder, _dirs, files in os.walk(
                os.path.join(self._root, "lanes"), onerror=_walk_error
            ):
                for name in files:
                    highest = _higher(highest, _head(name))
            for name in _fsops.listdir(os.path.join(self._root, "queue")):
                parsed = parse_queue_name(name)
                if parsed is not None:
                    highest = _higher(highest, entry_seq(parsed[0]))
            # Deleted runs' numbers, in their tombstones (the newest runs may be gone), and
            # the creation log's (a creation whose names a power cut lost).
            logs = [(os.path.join(self._root, LOG_FILE), "record")]
            stones = os.path.join(self._root, TOMBSTONES_DIR)
            logs += [
                (os.path.join(stones, name), "")
                for name in _fsops.listdir(stones)
                if name.endswith(".jsonl")
            ]
            for path, key in logs:
                try:
                    highest = _higher(highest, _highest_logged(path, key))
                except FileNotFoundError:
                    continue  # no creation log
        except (OSError, StoreError) as error:
            raise StoreCorrupted(
                f"{self.path}: not a sequence number, and the numbers in use cannot be read to "
                f"rebuild it ({error}): write a number above every run's creation number "
                "(`seq`) into it"
            ) from None
        return highest

    def _highest_indexed(self) -> int:
        """The highest number of ``index/``: that of the newest bucket holding one."""
        top = os.path.join(self._root, "index")
        for first in sorted(_fsops.listdir(top), reverse=True):
            if not (len(first) == 10 and first.isascii() and first.isdigit()):
                continue  # not a bucket
            outer = os.path.join(top, first)
            for second in sorted(_fsops.listdir(outer), reverse=True):
                if not (
                    len(second) == 4
                    and second[0] == "b"
                    and second.isascii()
                    and second[1:].isdigit()
                ):
                    continue
                highest = 0
                for name in _fsops.listdir(os.path.join(outer, second)):
                    highest = _higher(highest, _head(name))
                if highest:
                    return highest
        return 0


def _walk_error(error: OSError) -> None:
    if not isinstance(error, FileNotFoundError):  # a tree not made yet
        raise error


def _head(name: str) -> int:
    """The creation number an index or lane name starts with (0: none)."""
    head = name.partition(SEP)[0].partition(".")[0]
    ok = len(head) in (SEQ_WIDTH, 20) and head.isascii() and head.isdigit()
    return int(head) if ok else 0


_SEQ_KEY = re.compile(rb'"seq":\s*(\d{1,16})\b')
"""A tombstone's number as ``orjson`` writes it (a key, so never inside a string: a string's
quotes are escaped). A false match can only raise the rebuilt number, never lower it."""


def _highest_logged(path: str, key: str) -> int:
    """The highest ``seq`` of a JSON-lines file (of each line's ``key`` object, if given),
    read a block at a time: tombstones by a pattern (a million lines parsed one by one took
    seconds), the creation log (at most ``_creations.LIMIT`` and a line) line by line."""
    highest = 0
    with open(path, "rb") as lines:
        if key:
            for line in lines:
                highest = _higher(highest, _logged_seq(line, key))
            return highest
        tail = b""
        while block := lines.read(1 << 20):
            block = tail + block
            cut = block.rfind(b"\n") + 1
            block, tail = block[:cut], block[cut:]
            for found in _SEQ_KEY.findall(block):
                highest = _higher(highest, int(found))
        for found in _SEQ_KEY.findall(tail):
            highest = _higher(highest, int(found))
    return highest


def _logged_seq(line: bytes, key: str) -> int:
    """The ``seq`` of a JSON line (of its ``key`` object, if given); 0 if none."""
    try:
        found = orjson.loads(line)
        if key:
            found = found.get(key)
        seq = found.get("seq")
    except (orjson.JSONDecodeError, AttributeError):
        return 0
    return seq if isinstance(seq, int) else 0


def _higher(highest: int, number: int) -> int:
    """The higher of the two, but for a number no index name can hold (a stray name of
    digits): followed, it would give every later run a name that sorts before the others."""
    return number if highest < number < 10**SEQ_WIDTH else highest
