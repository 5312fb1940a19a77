"""Queue semantics of the local store: group lanes, concurrency slots, rate limits.

Each is made atomic across processes by a ``flock``, which the kernel drops when its holder
dies, so nothing is ever left taken by a crashed process.

- **Lanes** (``lanes/<group hash>/<seq>+<run_id>``): one empty file per unfinished run of a
  group. ``seq`` comes from ``lanes/<group hash>.seq``, read and bumped under a lock on that
  file, so a run created later always sorts after one created earlier, whatever the run ids or
  the clocks say. The lease holder removes the entry once its run has ended; an entry whose run
  has ended (a crash between the two) is removed by the next reader.
- **Slots** (``slots/<cap hash>.<i>``): place ``i`` of a cap is taken by locking that file;
  the descriptor stays open while the run is driven.
- **Rates** (``rates/<limit hash>.json``): the start times within the window, rewritten under
  a lock on ``rates/<limit hash>.lock``. Not fsynced: after a power cut the window may forget
  some starts, which only lets a few more start early.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator

import orjson

from wf._exceptions import RunNotFound, StoreCorrupted, StoreError
from wf.store._base import RunStatus, Slot
from wf.store.local import _atomic, _fsops, _records
from wf.store.local._layout import SEP, digest, run_exists


@contextlib.contextmanager
def _locked(path: str) -> Iterator[int]:
    """An exclusive, blocking ``flock`` on ``path`` (created if missing) for the block."""
    fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as error:
            raise StoreError(f"cannot lock {path}: {error.strerror}") from error
        yield fd
    finally:
        _fsops.close(fd)


def _ensure_dir(path: str) -> None:
    _fsops.mkdir(path, allow=(errno.EEXIST,))


class Lanes:
    """``lanes/`` of one store."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "lanes")
        self._runs = os.path.join(root, "runs")
        self._names = _atomic.EmptyNames(root)

    def _lane(self, group: str) -> str:
        return os.path.join(self.dir, digest(group, 32))

    def join(self, group: str, run_id: str) -> None:
        """Put the run at the end of its group's lane (before the run is published: an entry
        whose run does not exist is skipped by readers)."""
        lane = self._lane(group)
        _ensure_dir(self.dir)
        _ensure_dir(lane)
        with _locked(lane + ".seq") as fd:
            raw = os.pread(fd, 64, 0)
            try:
                seq = int(raw.strip() or b"0") + 1
            except ValueError:
                raise StoreCorrupted(f"{lane}.seq: not a sequence number") from None
            os.pwrite(fd, f"{seq:020d}\n".encode(), 0)
            # Durable before the entry counts (deferred into creation's shared flush): a
            # counter that went back after a power cut would put a later run ahead.
            _fsops.fsync(fd, lane + ".seq")
            self._names.touch(lane, f"{seq:020d}{SEP}{run_id}")
        _fsops.fsync_dir(lane)

    def leave(self, group: str, run_id: str) -> None:
        """Remove the run's entry (its run has ended)."""
        lane = self._lane(group)
        suffix = SEP + run_id
        for name in _fsops.listdir(lane):
            if name.endswith(suffix):
                _fsops.unlink(os.path.join(lane, name), allow=(errno.ENOENT,))

    def ahead(self, group: str, run_id: str, limit: int) -> list[str]:
        """Unfinished runs of the group before ``run_id`` in lane order, at most ``limit``."""
        lane = self._lane(group)
        names = sorted(n for n in _fsops.listdir(lane) if SEP in n and n[0] != ".")
        suffix = SEP + run_id
        mine = next((n for n in names if n.endswith(suffix)), None)
        out: list[str] = []
        for name in names:
            if mine is not None and name >= mine:
                break
            if len(out) >= limit:
                break
            other = name.partition(SEP)[2]
            if other == run_id:
                continue
            if self._unfinished(other):
                out.append(other)
            elif not run_exists(os.path.join(self._runs, other)):
                continue  # being created, or a crashed creation: not in the lane (yet)
            else:
                _fsops.unlink(os.path.join(lane, name), allow=(errno.ENOENT,))  # ended
        return out

    def _unfinished(self, run_id: str) -> bool:
        try:
            raw = _records.read_raw(os.path.join(self._runs, run_id), run_id)
        except RunNotFound:
            return False
        return not RunStatus(raw.get("status") or "pending").is_terminal


class _LocalSlot(Slot):
    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    async def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            _fsops.close(fd)  # closing the descriptor drops the lock


class Slots:
    """``slots/`` of one store."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "slots")

    def _paths(self, name: str, capacity: int) -> list[str]:
        base = os.path.join(self.dir, digest(name, 32))
        return [f"{base}.{i}" for i in range(capacity)]

    def take(self, name: str, capacity: int) -> Slot | None:
        """Lock the first free place of the cap; None if all are taken."""
        _ensure_dir(self.dir)
        for path in self._paths(name, capacity):
            fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _fsops.close(fd)
                continue
            except OSError as error:
                _fsops.close(fd)
                raise StoreError(f"cannot lock {path}: {error.strerror}") from error
            return _LocalSlot(fd)
        return None

    def taken(self, name: str, capacity: int) -> int:
        """How many places are locked right now."""
        count = 0
        for path in self._paths(name, capacity):
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                count += 1
            finally:
                os.close(fd)
        return count


class Rates:
    """``rates/`` of one store."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "rates")

    def take(self, name: str, n: int, window: float, now: float) -> float | None:
        """Count a start if fewer than ``n`` happened in the window; else when one may."""
        _ensure_dir(self.dir)
        base = digest(name, 32)
        with _locked(os.path.join(self.dir, base + ".lock")):
            path = os.path.join(self.dir, base + ".json")
            try:
                starts = [
                    float(t) for t in orjson.loads(_fsops.read_bytes(path, allow=(errno.ENOENT,)))
                ]
            except (FileNotFoundError, orjson.JSONDecodeError, TypeError, ValueError):
                starts = []  # missing, or torn by a power cut: forget the window
            starts = [t for t in starts if t > now - window]
            if len(starts) >= n:
                return min(starts) + window
            starts.append(now)
            _atomic.replace_cache(self.dir, base + ".json", orjson.dumps(starts))
            return None
