"""Schedules, deleting runs (retention), tombstones, ``store info`` and ``store verify``.

::

    schedules/<sha>.json          one schedule (replaced atomically); <sha> hashes its id
    schedules/<sha>.lock          flock'ed while a process changes or fires that schedule
    tombstones/<b1>.jsonl         what is left of deleted runs, one JSON line each, grouped by
                                  the first bucket level of their ids (``_layout.bucket``)
    tombstones/.reserve           room kept for tombstones on a full disk (``_layout.RESERVE``)

Both directories are made on first use, so a format-2 store written before they existed is
read and written as it is (an older wf ignores them: it neither fires schedules nor deletes).

Deleting a run, in an order that a crash at any point leaves harmless:

1. take the run's lease (its journal's flock, and a format-1 store's ``lock`` file): a run a
   driver holds is skipped, and no driver can start on it meanwhile;
2. check that the record is finished;
3. append its tombstone (fsynced once per batch, before anything is removed; a run whose
   tombstone file cannot be written is not deleted, and the file is noted in ``faults``);
4. rename its directory into ``tmp/`` (the run disappears at once, atomically);
5. remove its hooks, its index, children, queue and lane entries (an entry whose run is gone
   is skipped by readers anyway), then delete the renamed directory.

A crash between 3 and 4 leaves a run that still exists, listed, beside its tombstone: the run
wins, the next ``gc`` deletes it again, and ``wf store verify`` removes the tombstone of a run
that exists. A crash between 4 and 5 leaves entries of no run, which ``verify`` removes
(``_ghosts``). A run without its ``index/`` entry (left by a wf that removed the entries
first) gets it back from ``verify``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import orjson

from wf._events import OUTCOME_EVENTS
from wf._exceptions import RunNotFound, StoreCorrupted, StoreError, UsageError
from wf._files import read_only
from wf.store import _forks
from wf.store._base import (
    Deleted,
    Event,
    Progress,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleLock,
    StoreStats,
    Tombstone,
    kept_count,
    lane_key,
    record_from_journal,
)
from wf.store._decode import journal_problems
from wf.store._faults import Faults, collect_faults, item_own, no_space
from wf.store._ids import validate_run_id
from wf.store.local import (
    _atomic,
    _fsops,
    _ghosts,
    _index,
    _journal,
    _records,
    _strays,
    _streams,
    _upgrade,
    _waitlock,
)
from wf.store.local._layout import (
    HEX_DIGITS,
    INBOX_DIR,
    JOURNAL_FILE,
    LOCK_FILE,
    RESERVE_FILE,
    RUN_FILE,
    SEP,
    SEQUENCE_FILE,
    TOMBSTONES_DIR,
    child_name,
    damage,
    digest,
    gather_damage,
    index_name,
    keep_room,
    parse_queue_name,
    record_due,
    run_exists,
    run_present,
    stale_temps,
)
from wf.store.local._migrate7 import tags_in, tags_of
from wf.store.local._segments import Loc, Packed, Segments, decode

if TYPE_CHECKING:
    from wf.store.local._store import LocalStore

SCHEDULES_DIR = "schedules"
LOCK_WAIT = 30.0
"""How long ``lock_schedule(wait=True)`` waits for another holder (who keeps it for ms)."""


def _schedule_name(schedule_id: str) -> str:
    return digest(schedule_id, 40)


# -- schedules -------------------------------------------------------------------------------


class _FileLock(ScheduleLock):
    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        _forks.hold(self)  # a forked child does not keep the lock (``_forks``)

    def lock_fds(self) -> list[int]:
        return [] if self._fd is None else [self._fd]

    def forked(self) -> None:
        self._fd = None  # the parent's lock: not the child's to give back
        _forks.let_go(self)

    async def release(self) -> None:
        fd, self._fd = self._fd, None
        _forks.let_go(self)
        if fd is not None:
            _fsops.close(fd)  # closing the descriptor releases the flock


class Schedules:
    """Operations on ``schedules/`` of one store."""

    def __init__(self, root: str, faults: Faults | None = None) -> None:
        self.dir = os.path.join(root, SCHEDULES_DIR)
        self.faults = faults if faults is not None else Faults()

    def path(self, schedule_id: str) -> str:
        """The schedule's file."""
        return os.path.join(self.dir, _schedule_name(schedule_id) + ".json")

    def make_dir(self) -> None:
        """Create ``schedules/`` if it is missing."""
        self._ensure_dir()

    def _ensure_dir(self) -> None:
        if _fsops.mkdir(self.dir, allow=(errno.EEXIST,)):
            _fsops.fsync_dir(os.path.dirname(self.dir))

    async def lock(self, schedule_id: str, *, wait: bool) -> ScheduleLock | None:
        """flock the schedule's lock file; with ``wait``, retry for up to ``LOCK_WAIT``."""
        self._ensure_dir()
        path = os.path.join(self.dir, _schedule_name(schedule_id) + ".lock")
        fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
        deadline = time.monotonic() + LOCK_WAIT
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return _FileLock(fd)
            except BlockingIOError:
                if not wait or time.monotonic() > deadline:
                    _fsops.close(fd)
                    if not wait:
                        return None
                    raise StoreError(
                        f"schedule {schedule_id!r} stayed locked for {LOCK_WAIT:.0f} s ({path})"
                    ) from None
            except OSError as error:
                _fsops.close(fd)
                raise StoreError(f"cannot lock {path}: {error.strerror}") from error
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    def save(self, schedule: Schedule) -> None:
        """Replace the schedule's file atomically (durably)."""
        self._ensure_dir()
        data = orjson.dumps(schedule.to_json())
        _atomic.replace(self.dir, _schedule_name(schedule.id) + ".json", data)

    def _read(self, path: str) -> Schedule | None:
        try:
            raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return None
        try:
            return Schedule.from_json(orjson.loads(raw))
        except (orjson.JSONDecodeError, TypeError, ValueError) as error:
            raise StoreCorrupted(f"{path}: not a schedule ({error})") from None

    def get(self, schedule_id: str) -> Schedule | None:
        """The schedule, or None."""
        found = self._read(self.path(schedule_id))
        return found if found is not None and found.id == schedule_id else None

    def delete(self, schedule_id: str) -> bool:
        """Remove the schedule's file (its lock file stays: another process may hold it)."""
        removed = _fsops.unlink(os.path.join(self.dir, _schedule_name(schedule_id) + ".json"))
        if removed:
            _fsops.fsync_dir(self.dir)
        return removed

    def name(self, schedule_id: str) -> str:
        """The schedule's file name in ``schedules/``."""
        return _schedule_name(schedule_id) + ".json"

    def all(self) -> list[Schedule]:
        """Every schedule, by id; a damaged file is skipped (noted in ``faults``, and named by
        ``wf store verify``)."""
        return sorted(self.by_name().values(), key=lambda s: s.id)

    def by_name(self) -> dict[str, Schedule]:
        """Every schedule, by file name; a damaged file is left out (see ``all``). A file
        where ``schedules/`` belongs: none, noted once in ``faults`` (verify names it)."""
        found: dict[str, Schedule] = {}
        try:
            names = _fsops.listdir(self.dir, allow=(errno.ENOENT, errno.ENOTDIR))
        except NotADirectoryError:
            self.faults.note(
                "schedule directory",
                SCHEDULES_DIR,
                self.dir,
                f"not a directory, where the store keeps its {SCHEDULES_DIR}/ (move it out of "
                "the store and put the directory back)",
            )
            return found
        for name in names:
            schedule = self.read_named(name)
            if schedule is not None:
                found[name] = schedule
        return found

    def read_named(self, name: str) -> Schedule | None:
        """The schedule in the file ``name``; None if it is gone, is not a schedule's file, or
        is damaged (noted in ``faults``)."""
        if not name.endswith(".json") or name.startswith(".") or os.sep in name:
            return None
        path = os.path.join(self.dir, name)
        with self.faults.contain("schedule file", name, path):
            return self._read(path)
        return None


# -- tombstones ------------------------------------------------------------------------------


class Tombstones:
    """``tombstones/<b1>.jsonl``: appended, never rewritten; looked up by one small file."""

    def __init__(self, root: str, faults: Faults | None = None) -> None:
        self.dir = os.path.join(root, TOMBSTONES_DIR)
        self.faults = faults if faults is not None else Faults()
        self.short: set[str] = set()
        """The ids the last ``add`` left out for lack of room."""

    def _path(self, run_id: str) -> str:
        return os.path.join(self.dir, run_id[:10] + ".jsonl")

    def add(self, stones: Sequence[Tombstone]) -> set[str]:
        """Append the tombstones and make them durable (one fsync per file); the ids whose
        tombstone was written. A damaged file (a directory where it belongs) is noted in
        ``faults`` and its runs left out: they are not deleted, the others are. On a full
        disk the room kept for this (``RESERVE``) is given up, then tombstones are written
        one at a time while they fit (the runs deleted free more); the ids left out for
        lack of room are ``short``."""
        self.short = set()
        if not stones:
            return set()
        if _fsops.mkdir(self.dir, allow=(errno.EEXIST,)):
            _fsops.fsync_dir(os.path.dirname(self.dir))
        by_file: dict[str, list[Tombstone]] = {}
        for stone in stones:
            by_file.setdefault(self._path(stone.id), []).append(stone)
        written: set[str] = set()
        with self._locked():
            for path, group in by_file.items():
                with self.faults.contain("tombstone file", os.path.basename(path), path):
                    written.update(self._append(path, group))
            _fsops.fsync_dir(self.dir)
            if not self.short:
                self.keep_room()
        return written

    def _append(self, path: str, group: list[Tombstone]) -> list[str]:
        """Append a file's tombstones (see ``add``); the ids written."""
        lines = [orjson.dumps(stone.to_json()) + b"\n" for stone in group]
        try:
            self._write(path, b"".join(lines))
            return [stone.id for stone in group]
        except StoreError as error:
            if not no_space(error):
                raise
        _fsops.unlink(os.path.join(self.dir, RESERVE_FILE))
        done: list[str] = []
        for stone, line in zip(group, lines, strict=True):
            try:
                self._write(path, line)
            except StoreError as error:
                if not no_space(error):
                    raise
                self.short.update(s.id for s in group[len(done) :])
                break
            done.append(stone.id)
        return done

    def no_room(self) -> StoreError:
        """What a deletion that could not write a single tombstone says."""
        return StoreError(
            f"no space left on the device of {self.dir}: a run is deleted only once its "
            "tombstone is written, and not one fits; free some space and run wf gc again"
        )

    @staticmethod
    def _write(path: str, data: bytes) -> None:
        """Append ``data`` to a tombstone file and fsync it. A write cut short is cut off
        (a full disk leaves part of a line, onto which the next append would run, and the
        tombstone there could no longer be read); so is a torn last line a crash left."""
        fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
        try:
            size = os.fstat(fd).st_size
            if size and _fsops.pread(fd, 1, size - 1, path) != b"\n":
                head = _fsops.pread(fd, size, 0, path)
                size = head.rfind(b"\n") + 1
                _fsops.truncate(fd, size, path)
            try:
                _fsops.write_all(fd, data, path, size)
                _fsops.fsync(fd, path)
            except BaseException:
                with contextlib.suppress(StoreError):
                    _fsops.truncate(fd, size, path)
                raise
        finally:
            _fsops.close(fd)

    def keep_room(self) -> None:
        """Make ``RESERVE_FILE`` if it is missing and there is room (else nothing)."""
        keep_room(os.path.dirname(self.dir))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive ``flock`` on ``tombstones/.lock``: appends and a prune's rewrite of
        a file never interleave (an append into a file being replaced would be lost)."""
        path = os.path.join(self.dir, ".lock")
        fd = _fsops.open_fd(path, os.O_RDWR | os.O_CREAT)
        try:
            _waitlock.flock(fd, fcntl.LOCK_EX, path, "taken to add, prune or verify tombstones")
            yield
        finally:
            _fsops.close(fd)

    def prune(self, before: float) -> int:
        """Drop the tombstones of runs deleted before ``before``; each file is replaced
        atomically (or removed when nothing is left). Returns how many went."""
        pruned = 0
        names = [n for n in _fsops.listdir(self.dir) if n.endswith(".jsonl")]
        if not names:
            return 0
        with self._locked():
            for name in sorted(names):
                path = os.path.join(self.dir, name)
                try:
                    raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
                except FileNotFoundError:
                    continue
                except StoreCorrupted:
                    continue  # a directory where the file belongs: verify names it
                kept = []
                for line in raw.split(b"\n")[:-1]:  # a torn last line goes too
                    try:
                        stone = Tombstone.from_json(orjson.loads(line))
                    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                        kept.append(line)  # not ours to judge: verify names it
                        continue
                    if stone.deleted_at < before:
                        pruned += 1
                    else:
                        kept.append(line)
                if len(kept) == raw.count(b"\n"):
                    continue
                if kept:
                    _atomic.replace(self.dir, name, b"".join(line + b"\n" for line in kept))
                else:
                    _fsops.unlink(path)
            _fsops.fsync_dir(self.dir)
        return pruned

    def get(self, run_id: str) -> Tombstone | None:
        """The run's latest tombstone (a torn last line, left by a crash, is ignored)."""
        path = self._path(run_id)
        try:
            raw = _fsops.read_bytes(path, allow=(errno.ENOENT, errno.ENOTDIR, errno.EISDIR))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None  # a directory where the file belongs holds none (verify names it)
        needle = orjson.dumps(run_id)
        found = None
        for line in raw.split(b"\n"):
            if needle in line:
                with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    stone = Tombstone.from_json(orjson.loads(line))
                    if stone.id == run_id:
                        found = stone
        return found

    def count(self) -> int:
        """How many tombstones there are: whole lines that are tombstones (a file that cannot
        be read holds none, nor does a line that is not one: verify names both)."""
        total = 0
        for name in _fsops.listdir(self.dir):
            if name.endswith(".jsonl"):
                with contextlib.suppress(FileNotFoundError, StoreCorrupted):
                    path = os.path.join(self.dir, name)
                    raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
                    for line in raw.split(b"\n")[:-1]:
                        with contextlib.suppress(orjson.JSONDecodeError, TypeError):
                            Tombstone.from_json(orjson.loads(line))
                            total += 1
        return total


# -- deleting runs ---------------------------------------------------------------------------


def _lock_run(store: LocalStore, run_dir: str) -> list[int] | None:
    """The run's lease locks taken without waiting; None if a driver holds the run."""
    paths = [os.path.join(run_dir, JOURNAL_FILE)]
    if store._lock_files:
        paths.insert(0, os.path.join(run_dir, LOCK_FILE))
    held: list[int] = []
    try:
        for path in paths:
            flags = os.O_RDWR | (os.O_CREAT if path.endswith(LOCK_FILE) else 0)
            try:
                fd = _fsops.open_fd(path, flags, allow=(errno.ENOENT,))
            except FileNotFoundError:
                break
            held.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                break
        else:
            return held
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    for fd in held:
        os.close(fd)
    return None


@contextlib.contextmanager
def holding(store: LocalStore, run_id: str) -> Iterator[bool]:
    """Hold the run against drivers and deletions while the block runs, without waiting:
    yields True if it exists and was taken (its lease locks; a packed run: the segments
    lock, which a deletion of packed runs holds throughout), False if it does not exist or
    another process has it (a driver, or a deletion in progress, which holds it from before
    its tombstone is written until the run's entries are gone). Verify repairs only what it
    holds, so it never takes a deletion in progress for one a crash cut short."""
    try:
        run_dir, loc = store._find(run_id)
    except (RunNotFound, StoreError, OSError):
        yield False  # no such run, or it cannot be told (named elsewhere)
        return
    if loc is not None:
        with store.segments.lock(wait=False) as held:
            yield held and _ghosts.exists(store, run_id)
        return
    try:
        fds = _lock_run(store, run_dir)
    except (StoreError, OSError):
        fds = None
    if fds is None:
        yield False
        return
    try:
        # Taken, but maybe only after a deletion renamed the run away: still there?
        yield run_present(run_dir)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def delete_runs(store: LocalStore, run_ids: Sequence[str], now: float, reason: str) -> Deleted:
    """Delete the finished runs among ``run_ids`` nobody drives (see the module docstring)."""
    out = Deleted()
    if not store._open(create=False):
        return out
    from wf.store.local import _compact

    in_dirs: list[str] = []
    packed: list[str] = []
    for run_id in run_ids:
        try:
            _run_dir, loc = store._find(run_id)
        except RunNotFound:
            continue
        (in_dirs if loc is None else packed).append(run_id)
    if packed:
        in_dirs.extend(_compact.delete(store, packed, now, reason, out, _forget))
    if in_dirs and not store._can_stage():
        in_dirs = []  # no tombstone for a deletion that cannot go on (packed runs went)
    locked: list[tuple[str, str, dict[str, object], list[int]]] = []
    try:
        for run_id in in_dirs:
            try:
                run_dir = store._existing(run_id)
            except RunNotFound:
                continue
            try:
                fds = _lock_run(store, run_dir)
            except StoreCorrupted:
                continue  # verify names it; a damaged run is not deleted blind
            if fds is None:
                continue  # a driver holds it: not now
            try:
                data = _records.read_raw(run_dir, run_id)
            except (RunNotFound, StoreCorrupted):
                for fd in fds:
                    os.close(fd)
                continue
            if not RunStatus(str(data.get("status", "pending"))).is_terminal:
                for fd in fds:
                    os.close(fd)
                continue
            locked.append((run_id, run_dir, data, fds))
        pending = locked
        while pending:
            written = store.tombstones.add(
                [_stone(run_id, data, now, reason) for run_id, _, data, _ in pending]
            )
            for run_id, run_dir, data, _fds in pending:
                if run_id not in written:
                    continue  # its tombstone file is damaged (noted), or the disk full
                size = _fsops.disk_usage(run_dir)
                trash = os.path.join(store.root, "tmp", f"deleted.{run_id}.{os.urandom(4).hex()}")
                try:
                    _fsops.rename(run_dir, trash, allow=(errno.ENOENT,))
                except FileNotFoundError:
                    continue
                # The run is gone first, its entries next: a crash in between leaves entries
                # of no run, which readers skip and ``wf store verify`` removes. The other
                # order left a run no listing has, so no later gc or retention ever found it.
                out.bytes += size
                _forget(store, run_id, data)
                store._seen.pop(run_id, None)
                store.counters.bump(str(data["status"]), out=True)
                store.counters.bump("tombstones")
                out.ids.append(run_id)
                shutil.rmtree(trash, ignore_errors=True)
            short = store.tombstones.short
            if not written and short and not out.ids:
                raise store.tombstones.no_room()
            # On a full disk, the runs deleted made room for the tombstones of the others.
            pending = [item for item in pending if item[0] in short] if written else []
        if out.ids:
            _fsops.fsync_dir(store.runs)
    finally:
        for *_, fds in locked:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
    if out.ids:
        store.hub.touch("")
        for run_id in out.ids:
            store.hub.touch(run_id)
    return out


def _stone(run_id: str, data: dict[str, object], now: float, reason: str) -> Tombstone:
    seq = int(data.get("seq") or 0)  # type: ignore[call-overload]
    return Tombstone(run_id, str(data.get("workflow", "")), str(data["status"]), now, reason, seq)


def _forget(store: LocalStore, run_id: str, data: dict[str, object]) -> None:
    """Remove every entry outside the run's directory that names the run. The run is gone
    already: damage where an entry would be (a file where a directory of entries belongs,
    a directory where an entry belongs) is said (``damage``: ``wf gc`` names and counts it)
    and passed, never a failure of the deletion. Nothing damaged is removed: it may be
    someone's file, and verify names it."""
    marks = os.path.join(store.hooks.dir, "runs", run_id)
    try:
        claimed = _fsops.listdir(marks, allow=(errno.ENOENT, errno.ENOTDIR))
    except NotADirectoryError:
        damage(f"{marks}: not a directory of hook markers; skipped", marks)
        # The markers cannot say which hook files are the run's: each is read (only now), so
        # that no hook is left naming a deleted run (its token taken for good).
        try:
            claimed = _fsops.listdir(store.hooks.dir, allow=(errno.ENOENT, errno.ENOTDIR))
        except NotADirectoryError:
            claimed = []
    for name in claimed:
        path = os.path.join(store.hooks.dir, name)
        hook = None
        if name.endswith(".json"):
            # A damaged hook file is left (and noted): it holds up no deletion.
            with store.faults.contain("hook file", name, path):
                hook = store.hooks._read_name(name)
        if hook is not None and hook.run_id == run_id:
            _remove_entry(path)
    shutil.rmtree(marks, ignore_errors=True)  # a file there is left (verify names it)
    parent = data.get("parent_id")
    seq = int(data.get("seq") or 0)  # type: ignore[call-overload]
    leaf = store.index.leaf(seq)
    expected = index_name(
        seq,
        run_id,
        RunStatus(str(data.get("status"))),
        str(data.get("workflow", "")),
        parent if isinstance(parent, str) else None,
    )
    # The record names the entry; listing the bucket (thousands of names in a busy quarter
    # hour) is only needed for an entry left stale by a crash.
    if not _remove_entry(os.path.join(leaf, expected)) and os.path.isdir(leaf):
        for name in store.index.current(seq, run_id):
            _remove_entry(os.path.join(leaf, name))
    store.index.forget_status(seq, expected)
    store.index.forget_workflow(seq, expected)
    store.index.forget_tags(seq, run_id, tags_in(data))
    if isinstance(parent, str) and _index.valid_id(parent):
        _remove_entry(os.path.join(store.index.children, parent, child_name(seq, run_id)))
    shutil.rmtree(os.path.join(store.index.children, run_id), ignore_errors=True)
    with _passed(store.queue.dir):
        for name in store.queue.known_names(run_id):
            store.queue.remove_name(name)
    group, queue = data.get("group"), data.get("queue")
    if isinstance(group, str):
        # An ended run has left its lane, unless a crash came between its last record and
        # that: readers skip an entry whose run is gone, but could never tell it from one of a
        # run being created, so it would stay for good.
        lane = lane_key(
            str(data.get("workflow", "")), queue if isinstance(queue, str) else None, group
        )
        with _passed(store.lanes.dir):
            store.lanes.leave(lane, run_id)


def _remove_entry(path: str) -> bool:
    """Remove one entry of a deleted run if it is there; whether it was. A file where one of
    its directories belongs (``children/<parent>``), or a directory where the entry belongs,
    is said and left (``_forget``)."""
    try:
        return _fsops.unlink(path, allow=(errno.ENOENT, errno.ENOTDIR, errno.EISDIR))
    except NotADirectoryError:
        stray = _blocking(path)
        damage(f"{stray}: not a wf index directory; skipped", stray)
    except IsADirectoryError:
        damage(f"{path}: a directory where an entry (an empty file) belongs; skipped", path)
    return False


def _blocking(path: str) -> str:
    """What stands where a directory of ``path`` belongs (a file, a link to nowhere): the
    one ancestor that is there but is no directory."""
    here = os.path.dirname(path)
    while here != os.path.dirname(here):
        if os.path.lexists(here) and not os.path.isdir(here):
            return here
        here = os.path.dirname(here)
    return os.path.dirname(path)


@contextlib.contextmanager
def _passed(where: str) -> Iterator[None]:
    """A deleted run's entries in ``where``: damage met there is said, and passed."""
    try:
        yield
    except StoreCorrupted as error:
        damage(str(error), where)


# -- info and verify -------------------------------------------------------------------------


def info(store: LocalStore, version: int | None) -> StoreStats:
    """Counts by status and tombstones from the counters (a scan of the index on a store
    whose counters ``wf store verify`` has not set yet), schedules, size."""
    counts = {status.value: 0 for status in RunStatus}
    tombstones = 0
    if version is not None and store.counters.ready():
        kept = store.counters.read()
        for status in counts:
            counts[status] = max(kept.get(status, 0), 0)
        tombstones = max(kept.get("tombstones", 0), 0)
    elif version is not None:
        counts, tombstones = scan_counts(store)
    return StoreStats(
        kind="local",
        location=store.root,
        format=version,
        runs=counts,
        schedules=len(store.schedules.all()) if version is not None else 0,
        tombstones=tombstones,
        size_bytes=None,  # a walk of every file: see docs/store.md, "Counts"
    )


def count_runs(root: str, unreadable: list[str] | None = None) -> dict[str, int]:
    """Runs by status (every status present), by reading every run's record; the ids of
    the runs whose record cannot be read (no status to count) go to ``unreadable``."""
    counts = {status.value: 0 for status in RunStatus}
    runs = os.path.join(root, "runs")
    try:
        names = os.listdir(runs)
    except FileNotFoundError:
        return counts
    index = _index.Index(root)
    for run_id in names:
        _upgrade.tick()  # during an upgrade (``_migrate6``): says how far it got
        run_dir = os.path.join(runs, run_id)
        if run_id.startswith(".") or not run_present(run_dir):
            continue
        try:
            raw = _records.read_raw(run_dir, run_id)
            status = str(raw.get("status"))
            seq = raw.get("seq")
            workflow, parent = raw.get("workflow"), raw.get("parent_id")
            if (
                status not in _TERMINAL
                and isinstance(seq, int)
                and isinstance(workflow, str)
                and (parent is None or isinstance(parent, str))
            ):
                # Counted as its index says, which verify leaves so (``lost_outcome``).
                status = lost_outcome(index, run_dir, run_id, seq, workflow, parent) or status
        except (RunNotFound, FileNotFoundError):
            continue  # a creation cut short, or deleted meanwhile: no run to count
        except StoreError:  # StoreCorrupted, EACCES, EIO: verify names the damage
            if unreadable is not None:
                unreadable.append(run_id)  # a run, with a status the scan cannot tell
            continue
        if status in counts:
            counts[status] += 1
    for run_id, packed in _packed_runs(root):
        try:
            if packed is None:
                raise StoreCorrupted(run_id)  # its locator or segment cannot be read
            status = str(packed.raw(os.path.join(runs, run_id)).get("status"))
        except StoreCorrupted:
            if unreadable is not None:
                unreadable.append(run_id)
            continue  # verify names the damage
        if status in counts:
            counts[status] += 1
    return counts


def _packed_runs(root: str) -> Iterator[tuple[str, Packed | None]]:
    """Every packed run without a directory (a directory wins), with its files; None for a
    run whose locator or line cannot be read (damaged, missing, unreadable: ``verify`` names
    it): still a run, with a status no scan can tell."""
    segments = Segments(root)
    runs = os.path.join(root, "runs")
    for run_id in segments.ids():
        if not _index.valid_id(run_id) or run_present(os.path.join(runs, run_id)):
            continue
        try:
            loc = segments.locate(run_id)
            if loc is None:
                continue  # unpacked meanwhile
            packed = segments.read(loc, run_id)
        except StoreError:
            yield run_id, None
            continue
        yield run_id, packed


def scan_counts(
    store: LocalStore, unreadable: list[str] | None = None
) -> tuple[dict[str, int], int]:
    """Runs by status and tombstones, counted by reading every run's record: what the
    counters must equal (``unreadable``: as ``count_runs``)."""
    return count_runs(store.root, unreadable), store.tombstones.count()


def _keep_unread(
    store: LocalStore, counts: dict[str, int], kept: dict[str, int], unreadable: list[str]
) -> list[str]:
    """Leave alone each count a scan found lower by no more than the runs it could not read:
    those runs are counted under a status the scan cannot tell, and taking them out of the
    count would make it drift once they are repaired (and counted again). ``counts`` is set
    to the kept count for each; one line each."""
    lines = []
    for name, found in sorted(counts.items()):
        have = kept.get(name, 0)
        if unreadable and found < have <= found + len(unreadable):
            counts[name] = have
            named = ", ".join(sorted(unreadable)[:3]) + (", ..." if len(unreadable) > 3 else "")
            lines.append(
                f"{store.counters.dir}: the count of {name} is {have}, a scan found {found} "
                f"and {len(unreadable)} run(s) it cannot read ({named}): left as it is"
            )
    return lines


def repair_counts(store: LocalStore) -> list[str]:
    """Set the counters to a scan's counts; one line per count that was off. A count a run
    that cannot be read may account for is left alone (``_keep_unread``)."""
    unreadable: list[str] = []
    counts, tombstones = scan_counts(store, unreadable)
    left = []
    if store.counters.ready():
        left = _keep_unread(store, counts, store.counters.read(), unreadable)
    off = store.counters.set_to({**counts, "tombstones": tombstones})
    was_ready = store.counters.ready()
    store.counters.mark_ready()
    if not was_ready:
        return []  # a store older than its counters: now they are set, and nothing was off
    return left + [
        f"{store.counters.dir}: the count of {name} was {kept_count(kept)}, a scan found "
        f"{found}: repaired"
        for name, (kept, found) in off.items()
    ]


def compare_counts(store: LocalStore) -> list[str]:
    """``repair_counts`` of a store that cannot be written: what is off, not repaired."""
    if not store.counters.ready():
        return []  # a store older than its counters: nothing kept to compare
    unreadable: list[str] = []
    counts, tombstones = scan_counts(store, unreadable)
    kept = store.counters.read()
    left = _keep_unread(store, counts, kept, unreadable)
    found = {**counts, "tombstones": tombstones}
    return left + [
        f"{store.counters.dir}: the count of {name} is {kept_count(kept.get(name, 0))}, a scan "
        f"found {found.get(name, 0)}: not repaired (the store is read-only)"
        for name in sorted(set(kept) | set(found))
        if kept.get(name, 0) != found.get(name, 0)
    ]


def _repair(store: LocalStore, off: Callable[..., bool]) -> list[str]:
    """What verify puts right beside the runs: tombstones, counts, ghosts, index entries.
    Each part is left out where one of the directories it needs is not one (``off``), and
    damage it meets is named and passed (``_step``)."""
    problems: list[str] = []
    with _step(problems):
        if not off(TOMBSTONES_DIR):
            problems += _verify_tombstones(store)  # first: the tombstone count is repaired next
            store.tombstones.keep_room()  # a store made by a wf that made none at creation
    with _step(problems):
        if not off(*_COUNTED):
            problems += repair_counts(store)
    with _step(problems):
        if not off(*_COUNTED, "tmp"):  # a run it cannot see is not taken for gone
            problems += _ghosts.sweep(store)
    with _step(problems):
        if not off("index"):
            older = store.index.sweep_older_entries()
            if older:
                problems.append(
                    f"{store.index.dir}: {older} entr{'y' if older == 1 else 'ies'} named as an "
                    "older wf (format 3) names them, written by one still running after the "
                    "upgrade: removed"
                )
    with _step(problems):
        if not off("index", "by-status", "by-workflow"):
            ready = store.index.ready()
            added = store.index.build_secondary(lambda run_id: holding(store, run_id))
            if added and ready:
                problems.append(
                    f"{store.index.by_status}: {added} run(s) had no entry in by-status/ or "
                    "by-workflow/ (a power cut; filtered listings missed them): added"
                )
    with _step(problems):
        if not off("index", _index.TAG_DIR):
            tags_ready = store.index.tags_ready()
            tagged = store.index.build_tags(lambda run_id: tags_of(store.root, run_id))
            if tagged and tags_ready:
                problems.append(
                    f"{store.index.by_tag}: {tagged} run(s) had no entry in by-tag/ (a power "
                    "cut; listings by queue, group or deployment missed them): added"
                )
    return problems


_COUNTED = ("runs", "packed", "segments", TOMBSTONES_DIR, "counts")
"""Where the run counts are counted from (and kept): a scan with one of them unreadable
would set every count wrong."""


@contextlib.contextmanager
def _step(problems: list[str]) -> Iterator[None]:
    """One part of verify: damage that stops it (a file where a directory it reads belongs)
    is named among ``problems`` and the other parts go on."""
    try:
        yield
    except StoreCorrupted as error:
        problems.append(str(error))
    except (NotADirectoryError, IsADirectoryError) as error:
        problems.append(f"{error.filename}: {error.strerror}")


def verify(store: LocalStore, on_progress: Progress | None = None) -> list[str]:
    """Every run's files against the format (packed runs' lines too); schedules and
    tombstones parse. Changes, and says so, the run counts, set from a scan when they are
    off, the other keepings ``_repair`` puts right (the tombstone reserve among them), the
    locator of a packed run that has its directory again (removed, its line counted dead), a
    run's entries that disagree with its record (``_reconcile_entries``: a record's lost
    creation number is written back), and the temporary files of message posts cut short;
    on a read-only store, nothing (a count that is off is said, not repaired). The directory
    of a creation a power cut cut short is named with its remedy and never removed or moved
    (``_cut_short``). ``on_progress(done, total)``: runs checked, now and then.

    The store's own top level is checked first (``_strays.root``): a file where one of its
    directories belongs is named once, and what lies under it is neither checked nor named
    again (every read there fails the same way); the rest of the store is checked."""
    said, broken = _strays.root(store)
    with gather_damage() as skipped:
        problems = _verify(store, on_progress, broken)
    # What the walks skipped (a stray name, a file where a bucket directory belongs): named,
    # never removed (it may be something a user put there).
    problems += [f"{line} (not made by wf: move it out of the store)" for line in skipped]
    return said + [line for line in problems if not _names_any(line, broken)]


def _names_any(line: str, paths: set[str]) -> bool:
    """Whether ``line`` names one of ``paths`` or something under it."""
    for path in paths:
        at = line.find(path)
        while at >= 0:
            end = at + len(path)
            if end == len(line) or not (line[end].isalnum() or line[end] in "._-+"):
                return True
            at = line.find(path, end)
    return False


def _verify(store: LocalStore, on_progress: Progress | None, broken: set[str]) -> list[str]:
    def off(*names: str) -> bool:
        return any(os.path.join(store.root, name) in broken for name in names)

    # A read-only store: nothing can be put right (nor a lock file made); check what reads.
    fix = not read_only(store.root)
    problems: list[str] = []
    if fix:
        problems += _repair(store, off)
    else:
        with _step(problems):
            if not off(*_COUNTED):
                problems += compare_counts(store)
    # None: cannot be told (its directory is not one); the checks that need it are left out.
    indexed: dict[str, list[str]] | None = None
    with _step(problems):
        if not off("index"):
            indexed = store.index.names_by_run()
    listed: dict[str, list[str]] | None = None
    with _step(problems):
        if not off("by-status") and store.index.ready():
            listed = {}
            for status in _index.STATUSES:
                top = os.path.join(store.index.by_status, status)
                for run_id, found in store.index.names_by_run(top).items():
                    listed.setdefault(run_id, []).extend(found)
    queued: set[str] | None = None
    with _step(problems):
        if not off("queue"):
            queued = {run_id for _due, run_id in store.queue.entries()}
    names: list[str] = []
    with _step(problems):
        if not off("runs"):
            names = sorted(_fsops.listdir(store.runs))
    locators: list[str] = []
    with _step(problems):
        if not off("packed"):
            locators = sorted(store.segments.ids())
    total = len(names) + len(locators)
    for done, run_id in enumerate(names):
        if on_progress is not None and done % 256 == 0:
            on_progress(done, total)
        if run_id.startswith("."):
            continue
        run_dir = os.path.join(store.runs, run_id)
        try:
            problems.extend(_verify_run(store, run_id, run_dir, indexed, listed, queued, fix=fix))
        except StoreError as error:
            if not isinstance(error, StoreCorrupted) and not item_own(error, run_dir):
                raise  # the store's failure, not the run's
            problems.append(f"run {run_id}: {error}")
    with _step(problems):
        if not off("segments", "packed"):
            problems.extend(
                _verify_segments(
                    store,
                    locators,
                    indexed,
                    lambda n: on_progress and on_progress(len(names) + n, total),
                    fix=fix,
                )
            )
            if fix and store.segments.numbers():
                with store.segments.lock(wait=False) as got:
                    if got:
                        # Dead bytes no count knows (a pack killed after its append): counted,
                        # so the next pass's ``reclaim`` rewrites their segment as it would
                        # any other.
                        store.segments.recount()
    if on_progress is not None:
        on_progress(total, total)
    with _step(problems):
        if not off(SCHEDULES_DIR):
            for name in _fsops.listdir(store.schedules.dir):
                if name.endswith(".json") and not name.startswith("."):
                    try:
                        store.schedules._read(os.path.join(store.schedules.dir, name))
                    except StoreCorrupted as error:
                        problems.append(str(error))
    for check, needs in (
        (lambda store: _verify_sequence(store, fix=fix), SEQUENCE_FILE),
        (_verify_hooks, "hooks"),
        (lambda store: _verify_queue_names(store.queue.dir), "queue"),
        (_verify_lanes, "lanes"),
        (_verify_rates, "rates"),
        (lambda store: _strays.names(store, broken), ""),
    ):
        with _step(problems):
            if not needs or not off(needs):
                problems.extend(check(store))
    return _once(problems)


_A_DIRECTORY = " is a directory where a file belongs: remove it"  # ``_fsops._fail``'s words
_A_STRAY = ": not an entry wf makes in "  # ``_strays.names``'s


def _once(problems: list[str]) -> list[str]:
    """``problems`` but a stray name's line for a directory a check read and named already
    (a directory at ``counts/ready``, ``rates/<h>.json``, ``segments/lock``): one item, one
    line."""
    read = {line.removesuffix(_A_DIRECTORY) for line in problems if line.endswith(_A_DIRECTORY)}
    if not read:
        return problems
    return [line for line in problems if line.partition(_A_STRAY)[0] not in read]


def _verify_tombstones(store: LocalStore) -> list[str]:
    """Each tombstone file reads and each line is a tombstone. A tombstone of a run that
    exists (same id and creation number: the deletion was cut short after its tombstones
    were written) is removed, and so is an earlier one of the same deletion (written again
    by the gc that finished it): one tombstone per deleted run, so their count is right."""
    tombstones = store.tombstones
    names = sorted(n for n in _fsops.listdir(tombstones.dir) if n.endswith(".jsonl"))
    if not names:
        return []
    problems: list[str] = []
    seqs: dict[str, int | None] = {}

    def live_seq(run_id: str) -> int | None:
        """The creation number of the run if it exists (-1 when it cannot be told)."""
        if run_id not in seqs:
            try:
                seqs[run_id] = int(store._raw(run_id).get("seq") or 0)
            except RunNotFound:
                seqs[run_id] = None
            except (StoreError, OSError, TypeError, ValueError):
                seqs[run_id] = -1  # damaged: named elsewhere; its tombstones are kept
        return seqs[run_id]

    def left(stone: Tombstone) -> bool:
        """Whether the run is left over by a deletion cut short, not one in progress (which
        also has its tombstone beside the run, until it renames the run away)."""
        with holding(store, stone.id) as held:
            if not held:
                return False
            try:
                return int(store._raw(stone.id).get("seq") or 0) == stone.seq
            except (RunNotFound, StoreError, OSError, TypeError, ValueError):
                return False

    with tombstones._locked():
        for name in names:
            path = os.path.join(tombstones.dir, name)
            try:
                raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
            except FileNotFoundError:
                continue
            except StoreCorrupted as error:
                problems.append(f"{error} (its runs' tombstones are lost; gc skips them)")
                continue
            parsed: list[tuple[bytes, Tombstone | None]] = []
            for number, line in enumerate(raw.split(b"\n")[:-1], 1):  # a torn last is allowed
                try:
                    parsed.append((line, Tombstone.from_json(orjson.loads(line))))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    problems.append(f"{path}:{number}: not a tombstone")
                    parsed.append((line, None))
            last = {(s.id, s.seq): i for i, (_, s) in enumerate(parsed) if s is not None}
            kept: list[bytes] = []
            live = twice = 0
            for i, (line, stone) in enumerate(parsed):
                if stone is not None and last[(stone.id, stone.seq)] != i:
                    twice += 1
                elif stone is not None and live_seq(stone.id) == stone.seq and left(stone):
                    live += 1
                else:
                    kept.append(line)
            if live:
                problems.append(
                    f"{path}: {live} tombstone(s) of runs that exist (a deletion cut short; "
                    "the next gc deletes them): removed"
                )
            if twice:
                problems.append(
                    f"{path}: {twice} tombstone(s) of deletions said twice (a deletion cut "
                    "short, then done again): removed"
                )
            if live or twice:
                if kept:
                    _atomic.replace(tombstones.dir, name, b"".join(line + b"\n" for line in kept))
                else:
                    _fsops.unlink(path)
                    _fsops.fsync_dir(tombstones.dir)
    return problems


def _reindex(store: LocalStore, record: RunRecord) -> str:
    """Give back a run's entries in ``index/`` (and the listings by status, workflow, tag
    and parent), lost to a deletion cut short by a wf that removed them before the run."""
    name = index_name(record.seq, record.id, record.status, record.workflow, record.parent_id)
    tags = _index.record_tags(record.queue, record.group, record.deployment)
    store.index.add(record.seq, name, tags, record.workflow)
    if record.parent_id is not None and _index.valid_id(record.parent_id):
        store.index.add_child(record.parent_id, record.seq, record.id)
    return (
        f"run {record.id}: no index entry (a deletion cut short: wf runs, gc and retention "
        "did not find it): added"
    )


def _reconcile_entries(
    store: LocalStore, record: RunRecord, names: list[str], listed: dict[str, list[str]] | None
) -> list[str]:
    """The run's entries in ``index/`` and ``by-status/`` against its record: one of each,
    named as the record says. Entries that disagree (an older wf that went on driving the
    run after an upgrade changed its record but not them, so listings by status showed it
    under its old status) are made right, while verify holds the run (a driver of it
    reconciles them itself). A record that lost its creation number (that older wf rewrote
    it without one) gets back the number its index entry carries. Entries at another number
    (stale: from an earlier creation of its id, cut short, the id created again since) go,
    with their listings by status and workflow (their names carry them). Their listings by
    tag and under a parent go as far as the run's record names the same ones: that earlier
    creation's own record is lost, so a tag or parent only it had may keep a listing, which
    listings leave out (they check each record's tags and parent)."""
    numbers = {int(name.split(SEP)[0]) for name in names}
    lost = not record.seq and len(numbers) == 1
    seq = next(iter(numbers)) if lost else record.seq
    want = index_name(seq, record.id, record.status, record.workflow, record.parent_id)
    statuses = listed.get(record.id, []) if listed is not None else [want]
    if not seq or (not lost and names == [want] and statuses == [want]):
        return []
    said = sorted({name.split(SEP)[2] for name in [*names, *statuses]})
    older = sorted({int(name.split(SEP)[0]) for name in [*names, *statuses]} - {seq})
    if lost:
        problem = (
            "its record has no creation number (an older wf rewrote it), its index entry "
            f"says {seq}"
        )
    elif older:
        at = ", ".join(str(number) for number in older)
        problem = (
            f"a stale index entry at creation number {at} beside its own ({seq}), from an "
            "earlier creation of this id (a page before the run listed the run; a listing "
            "by a tag or parent only that creation had may stay, and listings leave it out)"
        )
    else:
        problem = (
            f"its index entries say {', '.join(said)} but its record says {record.status} "
            "(listings by status showed it wrongly)"
        )
    problem = f"run {record.id}: {problem}"
    if read_only(store.root):
        return [f"{problem}: not repaired (the store is read-only)"]
    with holding(store, record.id) as held:
        if not held:
            return []  # being driven (its driver sets them) or deleted
        run_dir = os.path.join(store.runs, record.id)
        now = _records.with_blobs(run_dir, _records.read_raw(run_dir, record.id))
        if not now.seq and lost:
            now.seq = seq
            data, _blobs = _records.encode(now, run_dir, sync_dir=True)
            _atomic.replace(run_dir, RUN_FILE, data)
        want = index_name(now.seq, now.id, now.status, now.workflow, now.parent_id)
        if (
            not lost
            and store.index.agrees(now.seq, now.id, want)
            and all(int(name.split(SEP)[0]) == now.seq for name in [*names, *statuses])
        ):
            return []  # driven meanwhile: its driver set them right
        store.index.reconcile(now.seq, now.id, want, [*names, *statuses])
        tags = _index.record_tags(now.queue, now.group, now.deployment)
        for stale in {n for n in [*names, *statuses] if int(n.split(SEP)[0]) != now.seq}:
            # Its listings by status and workflow (the stale name's own) go too, and by tag
            # and parent as far as the record names the same (``withdraw``; see above).
            store.index.withdraw(int(stale.split(SEP)[0]), stale, tags, now.parent_id)
    return [f"{problem}: repaired"]


def _verify_sequence(store: LocalStore, *, fix: bool) -> list[str]:
    """The creation sequence holds a number; a damaged one is rebuilt (``fix``) as the next
    creation would (``CreationSequence.repair``), past every number in use."""
    try:
        raw = _fsops.read_bytes(store.sequence.path, allow=(errno.ENOENT,)).strip()
    except FileNotFoundError:
        return []  # no run created yet
    if raw.isascii() and raw.isdigit():
        return []
    if fix:
        done = store.sequence.repair()
        return [] if done is None else [f"{done}: repaired"]
    if raw:
        return [
            f"{store.sequence.path}: not a sequence number (not repaired: the store is "
            "read-only; the next creation rebuilds it)"
        ]
    return []  # empty: damage only in a store with runs, which a creation looks for


def _verify_hooks(store: LocalStore) -> list[str]:
    """Each hook file parses, and names a run that exists: a hook left by a deletion cut
    short (or one that could not find it) keeps its token taken, so that a new run asking
    for it fails ("already used by" the deleted run). Named, not removed."""
    problems = []
    for name in sorted(_fsops.listdir(store.hooks.dir)):
        if name.endswith(".json") and not name.startswith("."):
            try:
                hook = store.hooks._read_name(name)
            except StoreCorrupted as error:
                problems.append(str(error))
                continue
            if hook is None:
                continue
            try:
                store._find(hook.run_id)
            except RunNotFound:
                path = os.path.join(store.hooks.dir, name)
                problems.append(
                    f"{path}: a hook of run {hook.run_id}, which does not exist (its token "
                    "stays taken: move the file out of the store to free it)"
                )
            except StoreError:
                continue  # the run's own damage: named with the runs
    return problems


def _verify_lanes(store: LocalStore) -> list[str]:
    """Each lane is a directory named by its hash, of lane entries (files): a name wf never
    makes there is named, as ``_strays`` names those of the other directories. One listing
    of each lane, whose kinds come with it."""
    problems: list[str] = []
    for lane in sorted(_fsops.listdir(store.lanes.dir)):
        path = os.path.join(store.lanes.dir, lane)
        if lane.startswith("."):
            continue  # a temporary file
        try:
            entries = _lane_entries(path)
        except NotADirectoryError:
            if lane.endswith(".seq") and not read_only(store.root):
                # A lane's counter as format 3 kept it: an older wf still running after the
                # upgrade wrote it. Nothing reads it now.
                _fsops.unlink(path)
                problems.append(f"{path}: a lane counter of an older wf (format 3): removed")
                continue
            problems.append(f"{path}: not a lane (a file where lanes are directories)")
            continue
        except OSError as error:  # ELOOP: a symbolic link that leads nowhere
            problems.append(f"{path}: not a lane ({error.strerror})")
            continue
        if not (len(lane) == 32 and set(lane) <= HEX_DIGITS):
            # A directory no lane hashes to: what it holds is part of that one item.
            problems.append(
                f"{path}: not an entry wf makes in lanes/ (readers skip it; move it out of the "
                "store)"
            )
            continue
        for entry, is_file in entries:
            if entry.startswith("."):
                continue
            if not _lane_entry(entry):
                problems.append(f"{os.path.join(path, entry)}: not a lane entry")
            elif not is_file:
                problems.append(
                    f"{os.path.join(path, entry)}: not a file, so not a lane entry wf made "
                    "(readers skip it; move it out of the store)"
                )
    return problems


def _lane_entries(path: str) -> list[tuple[str, bool]]:
    """The names in a lane's directory, by name, and whether each is a regular file;
    ``OSError`` (``ENOTDIR``, ``ELOOP``) if it is no directory."""
    try:
        with os.scandir(path) as found:
            return sorted((e.name, e.is_file(follow_symlinks=False)) for e in found)
    except FileNotFoundError:
        return []  # gone meanwhile
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise
        _fsops.fail("list", path, error)


def _verify_rates(store: LocalStore) -> list[str]:
    """Each rate window is a list of start times."""
    problems = []
    for name in sorted(_fsops.listdir(store.rates.dir)):
        if name.endswith(".json") and _strays.rate_name(name):  # the others: ``_strays``
            path = os.path.join(store.rates.dir, name)
            try:
                starts = orjson.loads(_fsops.read_bytes(path, allow=(errno.ENOENT,)))
            except FileNotFoundError:
                continue
            except orjson.JSONDecodeError:
                starts = None
            if not isinstance(starts, list) or not all(
                isinstance(t, int | float) and not isinstance(t, bool) for t in starts
            ):
                problems.append(f"{path}: not a list of start times (the rate limit forgets it)")
    return problems


def _verify_queue_names(folder: str) -> list[str]:
    """Each name in ``queue/`` is an entry wf made: an empty file (or a link to the shared
    empty file ``tmp/names``) named ``<due>[+tags]+<run id>``. Readers pass over anything
    else; it is named here (hidden names are temporary files)."""
    problems = []
    for name in sorted(_fsops.listdir(folder)):
        if name.startswith("."):
            continue
        path = os.path.join(folder, name)
        parsed = parse_queue_name(name)
        if parsed is None or not _index.valid_id(parsed[1]):
            problems.append(f"{path}: not a queue entry (a name wf never makes; remove it)")
        elif os.path.islink(path):
            problems.append(f"{path}: a symbolic link, not a queue entry wf made (remove it)")
        elif not os.path.isfile(path):
            problems.append(f"{path}: not a file, so not a queue entry wf made (remove it)")
    return problems


def _lane_entry(name: str) -> bool:
    """Whether ``name`` reads ``<seq>[.<attempt>]+<run id>``."""
    place, sep, run_id = name.partition(SEP)
    seq, _dot, attempt = place.partition(".")
    if not sep or not place.isascii() or not seq.isdigit() or (attempt and not attempt.isdigit()):
        return False
    try:
        validate_run_id(run_id)
    except UsageError:
        return False
    return True


def _verify_segments(
    store: LocalStore,
    locators: list[str],
    indexed: dict[str, list[str]] | None,
    progress: Callable[[int], object],
    *,
    fix: bool,
) -> list[str]:
    """Every locator points at a line of its run that decodes. A line no locator points at
    is dead (its run unpacked or deleted, or a pack cut short, which may have torn it): it is
    not read again, so its damage is no problem. A segment that is missing, cut short or
    cannot be read is one line, with the runs it holds."""
    segments = store.segments
    problems: list[str] = []
    lines: dict[tuple[int, int], tuple[str, int]] = {}
    damaged: dict[tuple[int, int], str] = {}
    sizes: dict[int, int] = {}
    unreadable: dict[int, str] = {}
    lost: dict[int, list[str]] = {}  # a segment's runs it cannot give back, in locator order
    troubled: set[int] = set()
    for segment in segments.numbers():
        path = segments.path(segment)
        try:
            sizes[segment] = os.lstat(path).st_size
            for offset, line in segments.lines(segment):
                try:
                    run_id, _packed = decode(line, f"{path} at byte {offset}")
                except StoreCorrupted as error:
                    damaged[(segment, offset)] = str(error)
                    continue
                lines[(segment, offset)] = (run_id, len(line))
        except FileNotFoundError:
            continue  # removed meanwhile (a rewrite): its runs were moved
        except StoreError as error:
            unreadable[segment] = _why_unreadable(error)
    for done, run_id in enumerate(locators):
        if done % 256 == 0:
            progress(done)
        path = os.path.join(segments.links, run_id)
        if not _index.valid_id(run_id):
            problems.append(f"{path}: not a run id")
            continue
        try:
            loc = segments.locate(run_id)
        except StoreError as error:
            problems.append(str(error))
            continue
        if loc is None:
            continue  # unpacked meanwhile
        if run_present(os.path.join(store.runs, run_id)):
            said = (
                f"run {run_id}: both a directory and a locator ({path}; a pack or an unpack "
                "was cut short): the directory is used"
            )
            if fix and _drop_locator(store, run_id, loc):
                problems.append(f"{said}, and the locator removed")
            else:
                problems.append(
                    f"{said}, and the next pack or delete of the run removes the locator"
                )
            continue
        if loc.segment in unreadable or loc.segment not in sizes:
            lost.setdefault(loc.segment, []).append(run_id)  # unreadable or missing
            continue
        if (loc.segment, loc.offset) in damaged:
            troubled.add(loc.segment)
            problems.append(f"{damaged[(loc.segment, loc.offset)]}: run {run_id} is lost")
            continue
        if lines.get((loc.segment, loc.offset)) != (run_id, loc.length):
            if loc.offset + loc.length > sizes[loc.segment]:
                lost.setdefault(loc.segment, []).append(run_id)  # past its end: cut short
                continue
            troubled.add(loc.segment)
            where = f"{segments.path(loc.segment)} at byte {loc.offset}"
            problems.append(f"{path}: points at {where}, which is not the line of run {run_id}")
            continue
        try:
            packed = segments.read(loc, run_id)
            events = _journal.parse(packed.journal, f"{path} (its journal)")
            record = RunRecord.from_json(packed.raw(path))
        except StoreCorrupted as error:
            problems.append(str(error))
            continue
        if events and events[0].get("type") != "run_started":
            problems.append(f"{path}: the journal's first event is not run_started")
        problems.extend(journal_problems(f"{path} (its journal)", events))
        if record.id != run_id:
            problems.append(f"{path}: the record names run {record.id!r}")
        elif indexed is not None and run_id not in indexed:
            problems.append(_reindex(store, record))
    for segment in sorted(set(unreadable) | set(lost)):
        troubled.add(segment)
        problems.append(
            _segment_damage(
                segments.path(segment), unreadable.get(segment), sizes.get(segment),
                lost.get(segment, []),
            )
        )  # fmt: skip
    for segment in segments.kept():
        if segment not in troubled and fix and segments.unkeep(segment):
            problems.append(
                f"{segments.path(segment)}: every run packed in it reads again: no longer "
                "kept from rewriting (its damaged mark removed)"
            )
    return problems


def _drop_locator(store: LocalStore, run_id: str, loc: Loc) -> bool:
    """Remove the locator of a run that has its directory (which readers use): its line is
    dead. Under the segments lock, not waited for (a packer holding it may be about to remove
    the directory: then the next verify looks again); whether it was removed."""
    with store.segments.lock(wait=False) as got:
        if not got:
            return False
        try:
            if not run_exists(store.run_dir(run_id)) or store.segments.locate(run_id) != loc:
                return False
            store.segments.unlink(run_id)
            _fsops.fsync_dir(store.segments.links)
        except StoreError:
            return False
        store.segments.bury([loc])
        return True


def _why_unreadable(error: StoreError) -> str:
    """Why a segment cannot be read, in a few words (its data may well be intact)."""
    cause = error.__cause__
    if isinstance(cause, OSError) and cause.errno in (errno.EACCES, errno.EPERM):
        return "unreadable: permission denied (its data may be intact: fix its permissions)"
    if isinstance(cause, OSError) and cause.errno is not None and cause.errno != errno.EISDIR:
        name = errno.errorcode.get(cause.errno, "error")
        return f"unreadable: [{name}] {cause.strerror}"
    return str(error)


def _segment_damage(path: str, unreadable: str | None, size: int | None, runs: list[str]) -> str:
    """One line for a segment whose runs cannot be read: what happened to it, and how many
    runs it holds (the first few named)."""
    named = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
    held = f"{len(runs)} packed run(s) ({named})" if runs else "no packed run"
    if unreadable is not None:
        what = unreadable if unreadable.startswith(path) else f"{path}: {unreadable}"
        if not runs:
            return f"{what} (no run is packed in it; packing goes on in a new one)"
        return f"{what}: the {held} in it cannot be read"
    if size is None:
        return f"{path}: missing, with the {held} it held (restore it from a backup)"
    return f"{path}: cut short at byte {size}: the {held} past it are lost"


def _verify_streams(run_id: str, run_dir: str) -> list[str]:
    """The run's streams whose files are damaged, as the listing meets them: a name file not
    UTF-8 or naming another stream (its chunks are still read by the name the run's journal
    wrote: nothing is rewritten, a key cannot be read back into a name), or an index or a
    data file that cannot be read (a directory in its place: the stream cannot be read)."""
    with collect_faults() as damaged:
        _streams.list_streams(run_dir, Faults(), run_id)
    lines = []
    for fault in damaged:
        said = fault.reason if fault.where in fault.reason else f"{fault.where}: {fault.reason}"
        key = fault.item.rpartition("/")[2]
        lines.append(f"run {run_id}: stream {key}: {said} (the store's listing leaves it out)")
    return lines


_BLOB = re.compile(r"[a-z_]+-[0-9a-f]{32}\.json")
"""A large value's file (``blob_name``): what a creation's staging may write beside the run's
journal, lock and record (``LocalStore._stage``)."""


def _beyond_creation(run_dir: str) -> list[str]:
    """What the run's directory holds that its creation's staging never writes (messages,
    logs, streams): such a run got going, and its journal's lost first block is damage."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    made = {JOURNAL_FILE, LOCK_FILE, RUN_FILE}
    return sorted(n for n in names if n not in made and not _BLOB.fullmatch(n))


def _cut_short(run_id: str, run_dir: str) -> list[str]:
    """What verify says of a run directory whose journal holds no complete line and which
    has no readable record. Holding only what a creation writes, it is a creation a power cut
    cut short: never reported created, no run, harmless (listings, compaction and a new
    creation of its id pass over it or replace it). Verify never removes or moves it: a
    retrying creator, a claim or a creation's recovery may be replacing it that very moment.
    Holding more, it was a run: damage, named and kept."""
    beyond = _beyond_creation(run_dir)
    if beyond:
        return [
            f"run {run_id}: {run_dir}: its journal holds no complete line and it has no "
            f"readable record, but it holds {', '.join(beyond)} (a run that got going: damage, "
            "not a creation cut short): left as it is (restore the run from a backup, or "
            "delete its directory)"
        ]
    return [
        f"run {run_id}: {run_dir}: no run: a creation a power cut cut short (no complete "
        "journal line, no record; never reported created), harmless (listings and compaction "
        f"pass over it): remove runs/{run_id} by hand (a later verify removes its entries), "
        "or it is replaced when the id is created again"
    ]


def _verify_run(
    store: LocalStore,
    run_id: str,
    run_dir: str,
    indexed: dict[str, list[str]] | None,
    listed: dict[str, list[str]] | None,
    queued: set[str] | None,
    *,
    fix: bool,
) -> list[str]:
    if not run_exists(run_dir):
        return []  # a creation cut short before its data: not a run
    if _records.cut_short(run_dir):
        return _cut_short(run_id, run_dir)
    problems = _stale_messages(run_id, run_dir, fix=fix) + _verify_streams(run_id, run_dir)
    journal_path = os.path.join(run_dir, JOURNAL_FILE)
    if not os.path.lexists(journal_path):
        return [
            *problems,
            f"run {run_id}: {journal_path} is missing (deleted?): the run cannot be read "
            "or driven until it is restored (from a backup)",
        ]
    try:
        events = _journal.read(journal_path)
    except StoreCorrupted as error:
        return [*problems, str(error)]
    except FileNotFoundError:
        return [*problems, f"{journal_path}: missing"]
    record_path = os.path.join(run_dir, RUN_FILE)
    try:
        cached = _records.decode(_fsops.read_bytes(record_path, allow=(errno.ENOENT,)), record_path)
    except FileNotFoundError:
        pass  # rebuilt from the journal until the first save
    except StoreCorrupted as error:
        problems.append(f"{error} (rebuilt from the journal until the run's next save)")
    else:
        if cached["id"] != run_id:
            problems.append(
                f"{record_path}: names run {cached['id']!r} (the run is read from its journal "
                "until its next save)"
            )
    if events and events[0].get("type") != "run_started":
        problems.append(f"{journal_path}:1: the first event is not run_started")
    problems.extend(journal_problems(journal_path, events))
    try:
        data = _records.read_raw(run_dir, run_id)
        record = _records.with_blobs(run_dir, data)
    except (StoreCorrupted, FileNotFoundError) as error:
        return [*problems, f"{os.path.join(run_dir, RUN_FILE)}: {error}"]
    if not record.status.is_terminal and indexed is not None and run_id in indexed:
        # The journal is read again after the index: an outcome appended meanwhile is in it.
        said = lost_outcome(
            store.index, run_dir, run_id, record.seq, record.workflow, record.parent_id
        )
        if said is not None:
            # Neither its entries nor its place in the queue are set toward the cut journal.
            return [*problems, _lost_outcome_line(run_id, journal_path, events, said)]
    rebuilt = record_from_journal(events[:1] + events[1:][-1:]) if events else None
    if rebuilt is not None and rebuilt.status.is_terminal and not record.status.is_terminal:
        problems.append(
            f"run {run_id}: the journal ended ({rebuilt.status}) but the record says "
            f"{record.status} (the next driver repairs it; it is due now)"
        )
    if indexed is None or record.id != run_id:
        pass  # ``index/`` cannot be read (named once), or the record is another run's
    elif run_id not in indexed:
        problems.append(_reindex(store, record))
    else:
        problems.extend(_reconcile_entries(store, record, indexed[run_id], listed))
    due = record_due(record.status, record.wake_at)
    if due is not None and queued is not None and run_id not in queued:
        problems.append(
            f"run {run_id}: {record.status} but not in the queue (no worker will pick it up)"
        )
    return problems


_TERMINAL = frozenset(status.value for status in RunStatus if status.is_terminal)


def lost_outcome(
    index: _index.Index, run_dir: str, run_id: str, seq: int, workflow: str, parent: str | None
) -> str | None:
    """The ended status the run's index entry says while its journal holds no outcome at
    all, or None. An entry is renamed to an ended status only once the outcome is durable
    (``_driver``), and an outcome is never removed (a retry appends after it), so such a
    journal lost lines it had made durable, its outcome among them: a damaged run, whose
    index is not to be set back toward what is left of its journal, nor driven (a post makes
    it due: its lease refuses it, ``LocalLease``). A journal damaged in itself (no first
    event, one replay cannot use) is not such a loss: its run may have been failed as
    damaged, with no outcome event. The journal is read after the index, so an
    outcome that was durable when its entry was renamed is in it. The entries are looked up
    by name (three ``lstat``): the count scan asks it of every run not ended."""
    if not seq:
        return None
    leaf = index.leaf(seq)
    ended = [
        status.value
        for status in RunStatus
        if status.is_terminal
        and os.path.lexists(os.path.join(leaf, index_name(seq, run_id, status, workflow, parent)))
    ]
    if not ended:
        return None
    try:
        events = _journal.read(os.path.join(run_dir, JOURNAL_FILE))
    except (StoreError, FileNotFoundError):
        return None  # damage of its own, named as such
    if any(event.get("type") in OUTCOME_EVENTS for event in events):
        return None
    if not events or events[0].get("type") != "run_started" or journal_problems("", events):
        # Damage of its own, named as such: a driver fails such a run as damaged by saving
        # a failed record with no outcome event (``_driver._mark_corrupt``), and that record
        # is written without an fsync, so a power cut can leave just the failed entries.
        return None
    return ended[0]


def _lost_outcome_line(run_id: str, journal_path: str, events: list[Event], said: str) -> str:
    last = events[-1].get("type") if events else None
    return (
        f"run {run_id}: {journal_path} holds no outcome (it ends at event {len(events)}, "
        f"{last}) but its index entries say {said} (renamed so only once its outcome was "
        "durable): the journal lost lines it had recorded, its outcome among them; left as "
        "it is (a worker does not drive it, also after a post): restore the run from a backup"
    )


def _stale_messages(run_id: str, run_dir: str, *, fix: bool) -> list[str]:
    """Temporary files of posts cut short by a crash (``stale_temps``) in the run's inbox:
    no message (nothing was acknowledged), but they keep an ended run from being packed.
    Removed unless the store is read-only (the packer removes them too)."""
    stale = stale_temps(os.path.join(run_dir, INBOX_DIR), time.time())
    if not stale:
        return []
    if fix:
        for path in stale:
            _fsops.unlink(path, allow=(errno.ENOENT,))
    names = ", ".join(os.path.basename(path) for path in stale)
    done = "removed" if fix else "left (read-only store)"
    return [f"run {run_id}: inbox/ held {names}, a post cut short by a crash: {done}"]
