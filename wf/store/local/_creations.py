"""The creation log (an opt-in prototype, ``LocalStore(creation_log=True)``): ``creations.jsonl``.

Today's creation makes its run durable with a ``syncfs`` (the run's new directory, journal and
entries are names, and names need their directories synced). With the log, a creation appends
one line (the record and the first events) to this file, which already exists and is durable,
so one ``fdatasync`` (shared through the group commit) makes the creation durable, and the
run's directory and entries, published as today, are left for a later flush:

* a lease's first flush of a run is a ``syncfs`` (``LocalLease``), which makes the run's names
  durable before anything written through the lease is acknowledged;
* a post to a run flushes the file system too (its message must not outlive a lost run);
* a *checkpoint* (when the log passes ``LIMIT``, and at a store's first use in a process)
  makes every logged run durable with one ``syncfs`` and empties the log; the one at first
  use first recreates every logged run a power cut lost (or left without data) and restores
  the entries of the others.

Appenders hold a shared ``flock`` on the log from their write until their flush returns; the
checkpoint takes it exclusively (never waiting), so it never empties a line whose run is not
yet durable by other means.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from typing import Any

import orjson

from wf._exceptions import StoreError
from wf.store.local import _fsops, _waitlock

LOG_FILE = "creations.jsonl"
LIMIT = 1 << 20
"""A log past this size is checkpointed by the next creation that finds no other in flight."""


class CreationLog:
    """One process's view of ``<root>/creations.jsonl`` (one descriptor, opened lazily)."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, LOG_FILE)
        self._root = root
        self._fd: int | None = None
        self._sharers = 0
        """Creations of this process between their write and their flush (holding LOCK_SH)."""
        self.since = 0
        """The oldest ``_fsops.mark`` of what the log's lines vouch for: taken when this process
        opened the log or last emptied it, and lowered to each creation's own (taken before it
        wrote its run's names). A checkpoint's flush, a lease's first flush and a post's must
        cover those names."""

    def fd(self) -> int:
        """The log, open for appending; created (and its name made durable) if missing."""
        if self._fd is None:
            self.since = _fsops.mark(self._root, os.stat(self._root).st_dev)
            try:
                fd = _fsops.open_fd(
                    self.path,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL,
                    allow=(errno.EEXIST,),
                )
                _fsops.fsync_dir(self._root)  # the log must be durable before it is relied on
            except FileExistsError:
                fd = _fsops.open_fd(self.path, os.O_WRONLY | os.O_APPEND)
            self._fd = fd
        return self._fd

    @contextlib.contextmanager
    def appending(self) -> Iterator[int]:
        """Hold the shared lock around one creation's write and flush; yields the descriptor."""
        fd = self.fd()
        if self._sharers == 0:
            # Waits only while a checkpoint runs.
            _waitlock.flock(fd, fcntl.LOCK_SH, self.path, "taken to checkpoint the creation log")
        self._sharers += 1
        try:
            yield fd
        finally:
            self._sharers -= 1
            if self._sharers == 0:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def append(self, fd: int, record: dict[str, Any], events: list[Any], since: int) -> None:
        """Write one creation as one line (the caller flushes it); ``since``: the mark the
        creation took before it wrote its run's names."""
        self.since = min(self.since, since)
        line = orjson.dumps({"record": record, "events": events}) + b"\n"
        _fsops.write_all(fd, line, self.path)

    def drop(self, fd: int, run_id: str, committer: Any) -> None:
        """A creation whose flush failed: say so in the log (best effort, not flushed: the
        disk just failed), and clear the failure from the descriptor, which later creations
        share: their lines are new writes, flushed (and checked) by their own flush."""
        with contextlib.suppress(StoreError):
            _fsops.write_all(fd, orjson.dumps({"drop": run_id}) + b"\n", self.path)
        committer.forget(fd)

    def size(self) -> int:
        """The log's size now."""
        return os.fstat(self.fd()).st_size

    def idle(self) -> bool:
        """No creation of this process is between its write and its flush."""
        return self._sharers == 0

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[list[dict[str, Any]] | None]:
        """Lock the log exclusively without waiting; yields its complete lines (None if another
        process holds it). The caller recovers them, then calls ``clear`` inside the block."""
        fd = self.fd()
        if not self.idle():
            yield None  # our own LOCK_SH would silently become the exclusive lock
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        try:
            yield self.entries()
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def entries(self) -> list[dict[str, Any]]:
        """The log's complete lines, decoded (a torn last line is skipped)."""
        data = _fsops.read_bytes(self.path)
        out = []
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line torn by a crash: never acknowledged
            if isinstance(entry, dict) and (
                isinstance(entry.get("record"), dict) or isinstance(entry.get("drop"), str)
            ):
                out.append(entry)
        return out

    def clear(self) -> None:
        """Empty the log (the caller has made every logged run durable first)."""
        fd = self.fd()
        self.since = _fsops.mark(self._root, os.stat(self._root).st_dev)
        _fsops.truncate(fd, 0, self.path)
        _fsops.fsync(fd, self.path)

    def close(self) -> None:
        """Close the descriptor."""
        if self._fd is not None:
            _fsops.close(self._fd)
            self._fd = None
