"""The store-wide creation sequence: ``sequence``, the last number given, as 20 digits.

Every run gets the next number when it is created (``RunRecord.seq``): queue entries of equal
priority and due time sort by it, index names start with it (listings are newest-created
first), and a group lane's entries are named by it. A number is read and bumped under an
exclusive ``flock`` on the file, held for a read and a write, so two processes never give the
same number and a run created later always has a larger one, whatever ids or clocks say.

The bump is fsynced before the run counts: inside a creation that fsync is deferred into the
creation's one shared flush (``_fsops.deferred_fsyncs``), like every other file of the run. A
number that went back after a power cut would put a later run ahead of an earlier one.
"""

from __future__ import annotations

import errno
import fcntl
import os

from wf._exceptions import StoreCorrupted, StoreError
from wf.store.local import _fsops, _waitlock
from wf.store.local._layout import SEQUENCE_FILE


class CreationSequence:
    """``<root>/sequence`` of one store (one descriptor, opened on first use)."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, SEQUENCE_FILE)
        self._root = root
        self._fd: int | None = None

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

    def _bump(self, floor: int, *, step: int) -> int:
        fd = self._open()
        try:
            _waitlock.flock(fd, fcntl.LOCK_EX, self.path, "taken to number a new run")
        except OSError as error:
            raise StoreError(f"cannot lock {self.path}: {error.strerror}") from error
        try:
            raw = _fsops.pread(fd, 64, 0, self.path)
            try:
                last = int(raw.strip() or b"0")
            except ValueError:
                raise StoreCorrupted(f"{self.path}: not a sequence number") from None
            number = max(last, floor) + step
            if number != last:
                _fsops.write_all(fd, f"{number:020d}\n".encode(), self.path, 0)
                _fsops.fsync(fd, self.path)
            return number
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the descriptor."""
        if self._fd is not None:
            _fsops.close(self._fd)
            self._fd = None
