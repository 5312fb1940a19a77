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
has runs) is rebuilt by the next taker, under the same lock (``_rebuild``): the damaged bytes
are kept aside in ``sequence.damaged``, the numbers in use are read from every name that
carries one (``index/``, ``children/``, ``lanes/``, ``queue/``, the tombstones of deleted
runs, the creation log), and the
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

_NUMBERED = ("index", "children", "lanes")
"""Trees whose file names start with a creation number (16 digits; a lane entry's 20)."""


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

    def take(self) -> int:
        """The next number (durable before the caller's run counts, see the module)."""
        return self._bump(0, step=1)

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

    def _bump(self, floor: int, *, step: int) -> int:
        with self._locked("taken to number a new run") as fd:
            last, rebuilt = self._read(fd)
            number = max(last, floor) + step
            if number != last or rebuilt is not None:
                self._write(fd, number)
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
        with self._locked("taken to repair it") as fd:
            last, rebuilt = self._read(fd)
            if rebuilt is not None:
                self._write(fd, last)  # read under the lock: never below the number on file
            return rebuilt

    def _read(self, fd: int) -> tuple[int, str | None]:
        """``(last number given, None)``, or for a damaged file (held under the lock)
        ``(the rebuilt last number, what was done)``, the damaged bytes set aside."""
        raw = _fsops.pread(fd, 64, 0, self.path)
        text = raw.strip()
        if text.isascii() and text.isdigit():
            return int(text), None
        highest = self._highest_in_use()
        if not text and highest == 0:
            return 0, None  # made, never written (a taker killed in between), and no run yet
        size = os.fstat(fd).st_size
        damaged = _fsops.pread(fd, min(size, 1 << 20), 0, self.path) if size else b""
        _atomic.replace(self._root, SEQUENCE_FILE + DAMAGED_SUFFIX, damaged)
        last = highest + REBUILD_GAP
        what = "empty" if not text else "not a sequence number"
        return last, (
            f"{self.path}: {what}; rebuilt past the highest creation number in use ({highest}"
            f" + {REBUILD_GAP}: {last}), the damaged file kept as "
            f"{self.path}{DAMAGED_SUFFIX}"
        )

    def _write(self, fd: int, number: int) -> None:
        data = f"{number:020d}\n".encode()
        _fsops.write_all(fd, data, self.path, 0)
        if os.fstat(fd).st_size > len(data):
            _fsops.truncate(fd, len(data), self.path)  # a longer damaged file's tail
        _fsops.fsync(fd, self.path)

    def _highest_in_use(self) -> int:
        """The highest creation number the store's names and logs carry (0: none)."""
        highest = 0
        try:
            for top in _NUMBERED:
                for _folder, _dirs, files in os.walk(
                    os.path.join(self._root, top), onerror=_walk_error
                ):
                    for name in files:
                        head = name.partition(SEP)[0].partition(".")[0]
                        if len(head) in (SEQ_WIDTH, 20) and head.isascii() and head.isdigit():
                            highest = _higher(highest, int(head))
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
                    data = _fsops.read_bytes(path, allow=(errno.ENOENT,))
                except FileNotFoundError:
                    continue  # no creation log
                for line in data.splitlines():
                    highest = _higher(highest, _logged_seq(line, key))
        except (OSError, StoreError) as error:
            raise StoreCorrupted(
                f"{self.path}: not a sequence number, and the numbers in use cannot be read to "
                f"rebuild it ({error}): write a number above every run's creation number "
                "(`seq`) into it"
            ) from None
        return highest


def _walk_error(error: OSError) -> None:
    if not isinstance(error, FileNotFoundError):  # a tree not made yet
        raise error


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
