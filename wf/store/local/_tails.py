"""Reading a file of lines that only grows at its end (a journal, step logs) from where the
last read of it ended, so that a follower parses only what was appended since.

Following a 30,000-step run re-read and re-parsed its growing journal on every change, and
slowed the run it followed to 20 ms a step (``wf run``'s live view). A ``Tails`` remembers,
for the files read lately, how many items their complete lines held and where those lines
end; a read from at least that many items on reads and parses only the bytes after them.
The file must still be the same file (device and inode) and the byte before that place still
a newline; anything else, or a parse that fails, is a read of the whole file.
"""

from __future__ import annotations

import collections
import errno
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from wf._exceptions import StoreCorrupted
from wf.store.local import _fsops

T = TypeVar("T")

Parse = Callable[[bytes], tuple[list[T], int]]
"""A file's bytes -> its complete items, and where the lines holding them end."""


class Tails:
    """Where the complete lines of recently read files end (a bounded cache: a file it no
    longer knows is read whole)."""

    KEPT = 64

    def __init__(self) -> None:
        self._ends: collections.OrderedDict[str, tuple[int, int, int, int]] = (
            collections.OrderedDict()
        )
        """path -> (device, inode, complete items, offset where their lines end)"""
        self._lock = threading.Lock()  # a big read parses in a thread (``unread``)

    def get(self, path: str) -> tuple[int, int, int, int] | None:
        return self._ends.get(path)

    def put(self, path: str, end: tuple[int, int, int, int]) -> None:
        with self._lock:
            self._ends[path] = end
            self._ends.move_to_end(path)
            while len(self._ends) > self.KEPT:
                self._ends.popitem(last=False)

    def unread(self, path: str) -> int:
        """Bytes a read of the file from where its last read ended would parse (the whole
        file if that is not known; 0 if it cannot be looked at: the read will say why)."""
        try:
            info = os.stat(path)
        except OSError:
            return 0
        known = self.get(path)
        if known is not None and known[:2] == (info.st_dev, info.st_ino):
            return max(0, info.st_size - known[3])
        return info.st_size


def read_from(
    path: str, start: int, tails: Tails, parse: Parse[T], *, missing: list[T] | None = None
) -> list[T]:
    """The file's complete items from ``start`` on: from where the last read of the same file
    ended, when ``tails`` knows it and it is not past ``start``; else the whole file. A file
    that does not exist is ``missing`` if given (else the store's error)."""
    allow = (errno.ENOENT,) if missing is not None else ()
    try:
        fd = _fsops.open_fd(path, os.O_RDONLY, allow=allow)
    except FileNotFoundError:
        assert missing is not None
        return missing
    try:
        info = os.fstat(fd)
        known = tails.get(path)
        if (
            known is not None
            and known[:2] == (info.st_dev, info.st_ino)
            and known[2] <= start
            and 0 < known[3] <= info.st_size
        ):
            _, _, seen, offset = known
            data = _fsops.pread(fd, info.st_size - offset + 1, offset - 1, path)
            if data[:1] == b"\n":  # still the end of a line: nothing before it was rewritten
                try:
                    later, end = parse(data[1:])
                except StoreCorrupted:
                    pass  # read whole below, for a message that numbers lines from the start
                else:
                    tails.put(path, (info.st_dev, info.st_ino, seen + len(later), offset + end))
                    return later[start - seen :]
        data = _fsops.pread(fd, info.st_size, 0, path)
        items, end = parse(data)
        tails.put(path, (info.st_dev, info.st_ino, len(items), end))
        return items[start:]
    finally:
        _fsops.close(fd)
