"""Queue semantics of the local store: group lanes, concurrency slots, rate limits.

Each is made atomic across processes by a ``flock``, which the kernel drops when its holder
dies, so nothing is ever left taken by a crashed process.

- **Lanes** (``lanes/<lane hash>/<seq>+<run_id>``): one empty file per unfinished run of a
  group lane (a group within its queue: ``lane_of``). ``seq`` is the run's number in the
  store-wide creation sequence (``_sequence``), so a run created later always sorts after one
  created earlier, whatever the run ids or the clocks say. The lease holder removes the entry
  once its run has ended; an entry whose run has ended (a crash between the two) is removed by
  the next reader.

  A retried run (``wf retry``) re-enters its lane at the back with ``<seq>.<attempt>+<run_id>``
  (``seq``: a new number of the sequence),
  made *before* its journal says it is unfinished again, so that no crash leaves it pending
  without a place. Until the retry's journal event is written, its record is still the ended
  attempt's (``attempt`` lower than the entry's): such an entry counts as unfinished while the
  run's lease is held (the retry holds it throughout) or the journal ends with the retry's
  event (a record the crash kept from being saved, repaired by the next driver); otherwise the
  retry died before its event, and the entry is removed.
- **Slots** (``slots/<cap hash>.<i>``): place ``i`` of a cap is taken by locking that file;
  the descriptor stays open while the run is driven.
- **Rates** (``rates/<limit hash>.json``): the start times within the window, rewritten under
  a lock on ``rates/<limit hash>.lock``. Not fsynced: after a power cut the window may forget
  some starts, which only lets a few more start early.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Container, Iterator
from typing import Any

import orjson

from wf._exceptions import RunNotFound, StoreError
from wf.store import _forks
from wf.store._base import RunStatus, Slot
from wf.store._faults import Faults
from wf.store.local import _atomic, _fsops, _journal, _records, _waitlock
from wf.store.local._layout import JOURNAL_FILE, SEP, digest, lane_hash

RELIST = 1.0
"""Seconds ``heads`` reads a lane's kept listing before it lists the lane again: a run of the
group whose creation was under way at the listing (its entry ahead of later runs' but its
record not yet written) is seen by then."""

_KEPT_LANES = 4096
"""Lanes whose listing this process keeps at most (all are dropped past it)."""


@contextlib.contextmanager
def _locked(path: str) -> Iterator[int]:
    """An exclusive, blocking ``flock`` on ``path`` (created if missing) for the block."""
    fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            _waitlock.flock(fd, fcntl.LOCK_EX, path, "taken to count a start")
        except OSError as error:
            raise StoreError(f"cannot lock {path}: {error.strerror}") from error
        yield fd
    finally:
        _fsops.close(fd)


def _ensure_dir(path: str) -> None:
    _fsops.mkdir(path, allow=(errno.EEXIST,))


class Lanes:
    """``lanes/`` of one store."""

    def __init__(self, root: str, faults: Faults | None = None) -> None:
        self.dir = os.path.join(root, "lanes")
        self._runs = os.path.join(root, "runs")
        self.faults = faults if faults is not None else Faults()
        self._names = _atomic.EmptyNames(root)
        self._entry_of: dict[str, str] = {}
        """Run id -> its entry's name as this process last saw or made it: ``leave`` removes
        it without listing the lane."""
        self._listed: dict[str, tuple[float, list[str]]] = {}
        """Lane path -> (when it was listed, its entries then in lane order, less those this
        process saw go and plus those it made): what ``heads`` reads while it is fresh."""

    def _saw(self, run_id: str, name: str) -> None:
        if len(self._entry_of) > 10_000:
            self._entry_of.clear()
        self._entry_of[run_id] = name

    def _lane(self, lane: str) -> str:
        return self.dir + os.sep + lane_hash(lane)

    def join(
        self,
        lane: str,
        run_id: str,
        seq: Callable[[], int],
        attempt: int | None = None,
        *,
        keep: bool = False,
    ) -> None:
        """Put the run at the end of its lane (``lane_of``) before the run is published (an
        entry whose run does not exist is skipped by readers), at its place ``seq()`` in the
        creation sequence (durable before the entry counts: deferred into creation's flush).

        ``attempt``: the run re-enters the lane for this attempt (a retry of an ended run, at
        a new number); any entry it had is removed, so that it has one place, the new one.
        With ``keep``, an entry it has for that attempt already is its place (a record saved
        after a crash)."""
        path = self._lane(lane)
        _ensure_dir(self.dir)
        _ensure_dir(path)
        if keep and any(
            n.endswith(SEP + run_id) and _attempt(n) == attempt for n in _fsops.listdir(path)
        ):
            return
        number = seq()
        place = f"{number:020d}" if attempt is None else f"{number:020d}.{attempt}"
        name = f"{place}{SEP}{run_id}"
        self._names.touch(path, name)
        if attempt is not None:
            self._drop(path, run_id, keep=number)
        _fsops.fsync_dir(path)
        self._saw(run_id, name)
        kept = self._listed.get(path)  # (a re-entry's ``_drop`` let the listing go)
        if kept is not None:
            bisect.insort(kept[1], name)

    def withdraw(self, lane: str, run_id: str, seq: int) -> None:
        """Remove the entry ``join`` made at place ``seq`` for a creation that did not publish
        its run (by its name: no other entry of the id is touched). Not synced: one lost to a
        crash is an entry of no run, which verify removes."""
        path = self._lane(lane)
        name = f"{seq:020d}{SEP}{run_id}"
        if self._entry_of.get(run_id) == name:
            del self._entry_of[run_id]
        if _fsops.unlink(path + os.sep + name):
            self._forget(path, name)

    def leave(self, lane: str, run_id: str) -> None:
        """Remove the run's entry (its run has ended): the one this process knows of, else
        whatever entry of it a listing of the lane finds. (A second entry, left by a retry a
        crash cut short, is removed by the next reader: its run has ended.)"""
        path = self._lane(lane)
        known = self._entry_of.pop(run_id, None)
        if known is not None and _fsops.unlink(path + os.sep + known):
            self._forget(path, known)
            return
        self._drop(path, run_id)

    def _forget(self, lane: str, name: str) -> None:
        """Take an entry that went out of the lane's kept listing."""
        kept = self._listed.get(lane)
        if kept is not None:
            at = bisect.bisect_left(kept[1], name)
            if at < len(kept[1]) and kept[1][at] == name:
                del kept[1][at]

    def _drop(self, lane: str, run_id: str, keep: int | None = None) -> None:
        self._listed.pop(lane, None)  # entries of the run may go that the listing has
        suffix = SEP + run_id
        for name in _fsops.listdir(lane):
            if name.endswith(suffix) and (keep is None or _seq(name) != keep):
                _fsops.unlink(os.path.join(lane, name), allow=(errno.ENOENT,))

    def ahead(self, lane_name: str, run_id: str, limit: int) -> list[str]:
        """Unfinished runs of the lane before ``run_id`` in lane order, at most ``limit``."""
        lane = self._lane(lane_name)
        names = sorted(n for n in _fsops.listdir(lane) if SEP in n and n[0] != ".")
        suffix = SEP + run_id
        mine = next((n for n in names if n.endswith(suffix)), None)
        if mine is not None:
            self._saw(run_id, mine)
        out: list[str] = []
        for name in names:
            if mine is not None and name >= mine:
                break
            if len(out) >= limit:
                break
            other = name.partition(SEP)[2]
            if other != run_id and self._holds(lane, name, other):
                out.append(other)
        return out

    def heads(self, lane_name: str, width: int, due: Container[str]) -> tuple[set[str], bool]:
        """The first ``width`` unfinished runs of the lane named ``lane_name`` (``lane_hash``),
        and whether that is all of them (fewer than ``width``: a run of the group that has no
        entry may run too, as ``ahead`` finds nothing before it).

        ``due``: runs the caller saw due, hence unfinished, whose records are not read; only
        an entry of another run (running with a later wake time, suspended, or ended with its
        entry left behind by a crash) costs a read of its record, and is removed if ended.

        Read from the lane's kept listing while it is younger than ``RELIST`` seconds: a
        claim after each run's end then costs no directory read, however long the lane."""
        lane = self.dir + os.sep + lane_name
        kept = self._listed.get(lane)
        if kept is not None and time.monotonic() - kept[0] < RELIST:
            found, chosen = self._first(lane, kept[1], width, due)
            # Still there: a run retried elsewhere left its place for one at the back, and
            # the kept listing would put it ahead. Else (or once the kept listing runs out:
            # runs that joined since elsewhere may be next) the lane is listed again.
            if len(found) >= width and _all_there(lane + os.sep, chosen):
                return found, False
        names = sorted(n for n in _fsops.listdir(lane) if SEP in n and n[0] != ".")
        if len(self._listed) >= _KEPT_LANES:
            self._listed.clear()
        self._listed[lane] = (time.monotonic(), names)
        found, _ = self._first(lane, names, width, due)
        return found, len(found) < width

    def _first(
        self, lane: str, names: list[str], width: int, due: Container[str]
    ) -> tuple[set[str], list[str]]:
        """The first ``width`` unfinished runs of ``names`` (the lane's entries in order) and
        their entries; an entry found to stand for an ended run, and removed, leaves
        ``names`` too."""
        out: set[str] = set()
        chosen: list[str] = []
        gone: list[str] = []
        for name in names:
            if len(out) >= width:
                break
            run_id = name.partition(SEP)[2]
            if run_id in out:
                continue  # a second entry of a run (a retry a crash cut short)
            if run_id in due or self._holds(lane, name, run_id):
                out.add(run_id)
                chosen.append(name)
                self._saw(run_id, name)  # its driver's ``leave`` then needs no listing
            elif not os.path.lexists(os.path.join(lane, name)):
                gone.append(name)  # ended (a record being created keeps its entry)
        for name in gone:
            names.remove(name)
        return out, chosen

    def _holds(self, lane: str, name: str, run_id: str) -> bool:
        """Whether the entry stands for an unfinished run; one for an ended run goes. An entry
        whose run cannot be read holds no place (noted in ``faults``): the lane goes on."""
        held = False
        with self.faults.contain("run", run_id, os.path.join(self._runs, run_id)):
            held = self._holds_read(lane, name, run_id)
        return held

    def _holds_read(self, lane: str, name: str, run_id: str) -> bool:
        raw = self._record(run_id)
        if raw is None:
            return False  # being created, or a crashed creation: not in the lane (yet)
        if not _ended(raw):
            return True
        # A retry that has taken its place and not yet saved its record holds the lease until
        # it has. Once the lease is free, the record read again (saved meanwhile), then the
        # journal decide (the truth: a record a crash kept from being saved after the retry's
        # event is repaired by the run's next driver).
        attempt = _attempt(name)
        if (
            attempt is not None
            and int(raw.get("attempt") or 1) < attempt
            and (
                self._leased(run_id)
                or not _ended(self._record(run_id) or raw)
                or self._retried(run_id, attempt)
            )
        ):
            return True
        _fsops.unlink(os.path.join(lane, name), allow=(errno.ENOENT,))  # ended
        return False

    def _retried(self, run_id: str, attempt: int) -> bool:
        """Whether the run's journal ends with the retry event of ``attempt`` or a later one."""
        journal = os.path.join(self._runs, run_id, JOURNAL_FILE)
        try:
            ends = _journal.read_ends(journal)
        except StoreError:
            return False  # gone, or unreadable: not a retry to wait for
        last = ends[-1] if ends else {}
        return last.get("type") == "run_retrying" and int(last.get("attempt") or 1) >= attempt

    def _record(self, run_id: str) -> dict[str, Any] | None:
        run_dir = os.path.join(self._runs, run_id)
        try:
            return _records.read_raw(run_dir, run_id)
        except RunNotFound:
            return None

    def _leased(self, run_id: str) -> bool:
        """Whether some process holds the run's lease (a probe: a shared lock, let go at once;
        asked only of an interrupted or ongoing retry, so it rarely delays anyone's lease)."""
        path = os.path.join(self._runs, run_id, JOURNAL_FILE)
        try:
            fd = _fsops.open_fd(path, os.O_RDONLY, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError as error:
            raise StoreError(f"cannot lock {path}: {error.strerror}") from error
        finally:
            _fsops.close(fd)  # drops the probe's lock
        return False


def _all_there(prefix: str, names: list[str]) -> bool:
    """Whether ``prefix + name`` names something for every name (``lexists``, unrolled)."""
    for name in names:
        try:
            os.lstat(prefix + name)
        except OSError:
            return False
    return True


def _seq(name: str) -> int:
    head = name.partition(SEP)[0].partition(".")[0]
    return int(head) if head.isascii() and head.isdigit() else -1


def _attempt(name: str) -> int | None:
    """The attempt a retry's entry was made for; None for an entry made at creation."""
    head = name.partition(SEP)[0]
    tag = head.partition(".")[2]
    return int(tag) if tag.isascii() and tag.isdigit() else None


def _ended(raw: dict[str, Any]) -> bool:
    return RunStatus(str(raw.get("status") or "pending")).is_terminal


class _LocalSlot(Slot):
    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        _forks.hold(self)  # a forked child does not keep the place (``_forks``)

    def lock_fds(self) -> list[int]:
        return [] if self._fd is None else [self._fd]

    def forked(self) -> None:
        self._fd = None  # the parent's place: not the child's to give back
        _forks.let_go(self)

    async def release(self) -> None:
        fd, self._fd = self._fd, None
        _forks.let_go(self)
        if fd is not None:
            _fsops.close(fd)  # closing the descriptor drops the lock


class Slots:
    """``slots/`` of one store."""

    def __init__(self, root: str, faults: Faults | None = None) -> None:
        self.dir = os.path.join(root, "slots")
        self.faults = faults if faults is not None else Faults()

    def _paths(self, name: str, capacity: int) -> list[str]:
        base = os.path.join(self.dir, digest(name, 32))
        return [f"{base}.{i}" for i in range(capacity)]

    def take(self, name: str, capacity: int) -> Slot | None:
        """Lock the first free place of the cap; None if all are taken."""
        _ensure_dir(self.dir)
        for path in self._paths(name, capacity):
            fd = None
            # A stray directory (or FIFO) where a place's file belongs can hold no lock: that
            # place is skipped, said once, and the others are tried.
            with self.faults.contain("slot", os.path.basename(path), path):
                fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
            if fd is None:
                continue
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
            except (FileNotFoundError, IsADirectoryError):
                continue  # none, or a stray directory no one can lock (``take`` says it)
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
            starts = self._starts(base, now, window)
            if len(starts) >= n:
                return min(starts) + window
            starts.append(now)
            _atomic.replace_cache(self.dir, base + ".json", orjson.dumps(starts))
            return None

    def retry_at(self, name: str, n: int, window: float, now: float) -> float | None:
        """What ``take`` would answer, counting nothing."""
        starts = self._starts(digest(name, 32), now, window)
        return min(starts) + window if len(starts) >= n else None

    def _starts(self, base: str, now: float, window: float) -> list[float]:
        path = os.path.join(self.dir, base + ".json")
        try:
            starts = [
                float(t) for t in orjson.loads(_fsops.read_bytes(path, allow=(errno.ENOENT,)))
            ]
        except (FileNotFoundError, orjson.JSONDecodeError, TypeError, ValueError):
            starts = []  # missing, or torn by a power cut: forget the window
        return [t for t in starts if t > now - window]
