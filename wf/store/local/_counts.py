"""Run counts kept as runs change, so ``wf store info`` reads a few file sizes, not the runs.

``counts/<name>.in`` and ``counts/<name>.out``: each change appends one byte to one of them
(``O_APPEND``: a one-byte write is atomic, so processes need no lock), and the count of
``<name>`` is the first file's size less the second's. Names are the run statuses and
``tombstones`` (tombstones kept). A creation bumps ``<status>.in``; a save that changes the
status moves one from ``<old>.out`` to ``<new>.in`` (where the lease renames the index
entry); a deletion bumps ``<status>.out`` and ``tombstones.in``; pruning tombstones bumps
``tombstones.out``.

The counts are a cache, like ``run.json``: written without fsync, beside (not atomically with)
the change they count; a count a full disk refuses removes ``counts/ready``. A process killed
between the two, or a power cut, leaves them off by the changes it cut; ``wf store verify``
counts the runs, compares, and sets the counts right (appending the difference) and says so.
``counts/ready`` says the counts cover the store from its start: a store made before counts
existed has none, and ``store info`` counts by a scan until ``wf store verify`` has set them.
"""

from __future__ import annotations

import errno
import os
import weakref

from wf._exceptions import StoreError
from wf.store._faults import no_space
from wf.store.local import _fsops

COUNTS_DIR = "counts"

_forked: weakref.WeakSet[Counters] = weakref.WeakSet()
"""Every ``Counters`` of this process: a forked child drops the descriptors it inherited
(its parent's) and opens its own, without asking ``getpid`` at every count."""


def _drop_inherited() -> None:
    for counters in list(_forked):
        counters._fds.clear()


os.register_at_fork(after_in_child=_drop_inherited)
READY = "ready"


class Counters:
    """The ``counts/`` files of one store, with descriptors kept open per process."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, COUNTS_DIR)
        self._fds: dict[str, int] = {}
        self._files: dict[tuple[str, bool], str] = {}
        """(name, out) -> the file's name: names are few (the statuses, ``tombstones``)."""
        self._paths: dict[str, str] = {}
        """A file's path (for ``_fsops``' errors), built when its descriptor is opened."""
        _forked.add(self)

    def _fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            _fsops.mkdir(self.dir, allow=(errno.EEXIST,))
            path = os.path.join(self.dir, name)
            fd = _fsops.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            self._fds[name] = fd
            self._paths[name] = path
        return fd

    def bump(self, name: str, n: int = 1, *, out: bool = False) -> None:
        """Add ``n`` to the count of ``name`` (take it away with ``out``)."""
        if n <= 0:
            return
        file = self._files.get((name, out))
        if file is None:
            file = self._files[name, out] = f"{name}.out" if out else f"{name}.in"
        fd = self._fds.get(file)
        if fd is None:
            fd = self._fd(file)
        try:
            _fsops.write_all(fd, b"." * n, self._paths[file])
        except StoreError as error:
            if not no_space(error):
                raise
            # A full disk: what was counted (a deletion that frees room) is done, and the
            # counts are a cache. They no longer cover the store: ``store info`` scans until
            # ``wf store verify`` sets them (removing a name needs no room).
            _fsops.unlink(os.path.join(self.dir, READY))

    def move(self, old: str, new: str) -> None:
        """A run's status went from ``old`` to ``new``."""
        if old != new:
            self.bump(old, out=True)
            self.bump(new)

    def read(self) -> dict[str, int]:
        """Every count kept (names never bumped are absent)."""
        sizes: dict[str, int] = {}
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return {}
        for entry in entries:
            name, dot, way = entry.name.rpartition(".")
            if not dot or way not in ("in", "out"):
                continue
            try:
                size = entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
            sizes[name] = sizes.get(name, 0) + (size if way == "in" else -size)
        return sizes

    def ready(self) -> bool:
        """Whether the counts cover the store from its start."""
        return os.path.exists(os.path.join(self.dir, READY))

    def mark_ready(self) -> None:
        """Say the counts cover the store (at its creation, or once verify has set them)."""
        _fsops.mkdir(self.dir, allow=(errno.EEXIST,))
        fd = _fsops.open_fd(os.path.join(self.dir, READY), os.O_WRONLY | os.O_CREAT)
        _fsops.close(fd)

    def set_to(self, found: dict[str, int]) -> dict[str, tuple[int, int]]:
        """Make the counts equal ``found`` by appending the differences; returns what was
        off, as ``name -> (kept, found)``."""
        kept = self.read()
        off = {}
        for name in sorted(set(kept) | set(found)):
            have, want = kept.get(name, 0), found.get(name, 0)
            if have != want:
                off[name] = (have, want)
                self.bump(name, abs(want - have), out=want < have)
        return off

    def close(self) -> None:
        """Close the descriptors this process opened."""
        fds, self._fds = self._fds, {}  # a forked child's start empty (``_drop_inherited``)
        for fd in fds.values():
            _fsops.close(fd)
