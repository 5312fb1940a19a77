"""Packing finished runs into segments, unpacking them, deleting packed runs (``_segments``).

A run is packed when it has ended more than ``older_than`` seconds ago and its directory holds
nothing a segment does not keep: ``run.json``, ``journal.jsonl``, ``logs.jsonl`` and an empty
inbox, no blob, no byte stream, no live hook, and no child still running (a child's end posts
to its parent). Anything else stays a directory, as before; so do the runs of a format-1
store (their ``lock`` files).

Who packs: ``compact`` finds the runs to pack through the listing index, not a scan of the
store: it lists only the index buckets whose directory changed since a pass last found
nothing more to pack in them (their modification times, in ``segments/scan.json``), so a pass
over a store of a million settled runs lists the newest buckets and stats the others. Per
batch of ``BATCH`` runs it holds ``segments/lock`` (one packer at a time: another skips the
batch; a post waits for it, see ``LocalStore.post``) and each run's lease (a run being driven
is left for the next pass); the lines are appended and fsynced once, the locators made and
``packed/`` fsynced once, then the directories removed.

A write to a packed run (a retry, a message, anything that takes its lease) unpacks it first
(``unpack``): under the lock, its directory is rebuilt in ``tmp/`` and renamed into ``runs/``,
then its locator removed; it is packed again once it has ended again. ``delete`` removes a
packed run in place: tombstone, locator, entries; its line becomes dead, and
``Segments.reclaim`` rewrites a segment once most of it is dead.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from wf._exceptions import RunNotFound, StoreCorrupted, StoreError
from wf.store._base import Deleted, Progress, RunStatus, Tombstone
from wf.store._faults import no_space
from wf.store.local import _atomic, _fsops, _index, _journal, _records
from wf.store.local._layout import (
    INBOX_DIR,
    JOURNAL_FILE,
    RUN_FILE,
    SEP,
    run_exists,
    stale_temps,
)
from wf.store.local._logs import LOGS_FILE
from wf.store.local._segments import LINE_LIMIT, Loc, Packed, SegmentsBusy, encode

if TYPE_CHECKING:
    from wf.store.local._store import LocalStore

KEPT = frozenset({RUN_FILE, JOURNAL_FILE, LOGS_FILE})
"""The files a packed run keeps (and an empty ``inbox/``)."""

TERMINAL = frozenset({s.value for s in RunStatus if s.is_terminal})

BATCH = 100
"""Runs packed per append and fsync."""

SETTLE_NS = 2_000_000_000
"""A bucket changed less than this long ago is listed again by the next pass: a change in the
same clock tick as the listing would not move its modification time."""


@dataclass
class Compacted:
    """What a ``compact`` pass did."""

    packed: int = 0
    """Runs packed."""
    freed: int = 0
    """Bytes their directories occupied on disk."""
    written: int = 0
    """Bytes of segment lines written for them."""
    pending: bool = False
    """The pass stopped at its limit: there is more to pack."""


def compact(
    store: LocalStore,
    *,
    now: float,
    older_than: float,
    limit: int,
    on_progress: Progress | None = None,
) -> Compacted:
    """Pack up to ``limit`` runs that ended before ``now - older_than`` (see the module)."""
    out = Compacted()
    if store._lock_files or limit <= 0:
        return out
    # Packing renames each packed run's directory into ``tmp/``: with a file there, nothing
    # is packed (no segment line written for a run that keeps its directory).
    leaves = []
    if store._can_stage():
        leaves = list(store.index._leaves(store.index.dir, 0, None))
    memo = _load_memo(store)
    leaves.reverse()  # oldest first: those settle for good
    for done, leaf in enumerate(leaves):
        if on_progress is not None:
            on_progress(done, len(leaves))
        key = os.path.relpath(leaf, store.root)
        try:
            changed = os.stat(leaf).st_mtime_ns
        except FileNotFoundError:
            continue
        if memo.get(key) == changed:
            continue
        settled = _pack_leaf(store, leaf, now, older_than, limit, out)
        if settled and time.time_ns() - changed > SETTLE_NS:
            memo[key] = changed
        else:
            memo.pop(key, None)
        if out.packed >= limit:
            out.pending = True
            break
    _save_memo(store, memo)
    store.tombstones.keep_room()  # room a deletion can give up on a full disk
    with store.segments.lock(wait=False) as got:
        if got:
            store.segments.reclaim()  # lines left dead by unpacks (deletes reclaim at once)
    if on_progress is not None:
        on_progress(len(leaves), len(leaves))
    return out


def _pack_leaf(
    store: LocalStore, leaf: str, now: float, older_than: float, limit: int, out: Compacted
) -> bool:
    """Pack what can be of one index bucket; whether nothing more is left to pack in it (but
    runs that never will be)."""
    candidates = []
    for name in _fsops.listdir(leaf):
        entry = _index.parse(name)
        if entry is None or entry[1] not in TERMINAL or not _index.valid_id(entry[0]):
            continue
        if os.path.isdir(os.path.join(store.runs, entry[0])):
            candidates.append(entry[0])
    settled = True
    for start in range(0, len(candidates), BATCH):
        room = limit - out.packed
        if room <= 0:
            return False
        batch = candidates[start : start + min(BATCH, room)]
        settled = _pack(store, batch, now - older_than, out) and settled
    return settled


def _pack(store: LocalStore, run_ids: Sequence[str], ended_before: float, out: Compacted) -> bool:
    """Pack the runs among ``run_ids`` that can be; whether the others never can."""
    with store.segments.lock(wait=False) as got:
        if not got:
            return False  # another process packs now: its batch, then ours next pass
        return _pack_locked(store, run_ids, ended_before, out)


def _pack_locked(
    store: LocalStore, run_ids: Sequence[str], ended_before: float, out: Compacted
) -> bool:
    settled = True
    held: list[tuple[str, str, list[int], int]] = []
    lines: list[bytes] = []
    trashed: list[str] = []
    try:
        for run_id in run_ids:
            if store._young.get(run_id, 0.0) > ended_before:
                settled = False  # ended too recently when last read: not even locked
                continue
            run_dir = os.path.join(store.runs, run_id)
            fd = _lock_journal(run_dir)
            if fd is None:
                settled = False  # driven now, or gone
                continue
            try:
                verdict = _packable(store, run_id, run_dir, ended_before)
            except (StoreError, OSError):
                verdict = None  # damaged: verify names it; it stays a directory
            if verdict is None or isinstance(verdict, bool):
                settled = settled and verdict is not False
                os.close(fd)
                continue
            held.append((run_id, run_dir, [fd], _fsops.disk_usage(run_dir)))
            lines.append(verdict)
        if not held:
            return settled
        places = _append_what_fits(store, lines)
        for *_, fds, _ in held[len(places) :]:
            settled = False  # no room for them now: the next pass
            for fd in fds:
                os.close(fd)
        del held[len(places) :], lines[len(places) :]
        replaced: list[Loc] = []
        linked = 0
        try:
            for (run_id, _, _, _), loc in zip(held, places, strict=True):
                # A locator left by an earlier pack that a crash kept from finishing, or by
                # an unpack cut short, is replaced: the line just written is the run as it
                # is, and the old one is dead.
                with contextlib.suppress(StoreError):
                    old = store.segments.locate(run_id)
                    if old is not None and old != loc:
                        replaced.append(old)
                store.segments.link(run_id, loc)
                linked += 1
            _fsops.fsync_dir(store.segments.links)
        except BaseException:
            # The lines no locator points at are dead (a crash here leaves them for
            # ``wf store verify`` to count); a count is a hint, so its own failure is moot.
            with contextlib.suppress(OSError, StoreError):
                store.segments.bury(places[linked:])
            raise
        if replaced:
            store.segments.bury(replaced)
        for (run_id, run_dir, _, size), line in zip(held, lines, strict=True):
            trash = os.path.join(store.root, "tmp", f"packed.{run_id}.{os.urandom(4).hex()}")
            try:
                _fsops.rename(run_dir, trash, allow=(errno.ENOENT,))
            except FileNotFoundError:
                continue
            trashed.append(trash)
            # Markers of released hooks (``Hooks.release`` leaves their directory): a block
            # each, and nothing reads them once the run has no live hook.
            trashed.append(os.path.join(store.hooks.dir, "runs", run_id))
            store._seen.pop(run_id, None)
            out.packed += 1
            out.freed += size
            out.written += len(line)
        _fsops.fsync_dir(store.runs)
    finally:
        # The locks go before the files: closing the last descriptor of a file already
        # removed costs the file system a journal commit each (the orphan list), measured 2 ms
        # a run. A driver that opened the journal before the rename and takes the lock now
        # finds it is no run's journal any more (``LocalStore._acquire``).
        for *_, fds, _ in held:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
    for trash in trashed:
        shutil.rmtree(trash, ignore_errors=True)
    return settled


def _append_what_fits(store: LocalStore, lines: list[bytes]) -> list[Loc]:
    """Append the lines, or on a full disk as many of the first as fit (halving the batch:
    each one packed frees its directory, so the next batch has more room); their places."""
    count = len(lines)
    while True:
        try:
            return store.segments.append(lines[:count])
        except StoreError as error:
            if not no_space(error):
                raise
            if count == 1:
                raise StoreError(
                    f"no space left on the device of {store.segments.dir} to pack finished "
                    f"runs: a run's line of {len(lines[0])} bytes does not fit (its directory "
                    "goes only once its line is written)"
                ) from error
            count //= 2


def _packable(
    store: LocalStore, run_id: str, run_dir: str, ended_before: float
) -> bytes | bool | None:
    """The run's segment line if it can be packed now; False if it may later (not ended
    long enough, a child still running); True if it never will as it is (a stream, a blob,
    a message, a live hook); None if it cannot be read."""
    if not run_exists(run_dir):
        return False
    try:
        raw = _records.read_raw(run_dir, run_id)
    except RunNotFound:
        # A creation a power cut cut short (``_records.cut_short``): no run, nothing to pack.
        # Passed over for good (its id's next creation replaces it, verify names it), and
        # the rest of the batch is packed.
        return True
    if not RunStatus(str(raw.get("status", "pending"))).is_terminal:
        return False
    ended = float(raw.get("updated_at") or 0.0)
    if ended > ended_before:
        if len(store._young) > 100_000:
            store._young.clear()
        store._young[run_id] = ended  # the next passes skip it until it is old enough
        return False
    store._young.pop(run_id, None)
    names = set(_fsops.listdir(run_dir))
    if INBOX_DIR in names:
        inbox = os.path.join(run_dir, INBOX_DIR)
        for stale in stale_temps(inbox, time.time()):
            # A post cut short by a crash between writing its message and naming it: no
            # message (nothing was acknowledged), and it would keep the run from being packed.
            _fsops.unlink(stale, allow=(errno.ENOENT,))
        if _fsops.listdir(inbox):
            return True
        names.discard(INBOX_DIR)
    if not names <= KEPT or raw.get("_blobs"):
        return True
    if store.hooks.of_run(run_id):
        return True  # a live hook (its markers stay after release: only live ones count)
    for child in _fsops.listdir(os.path.join(store.index.children, run_id)):
        child_id = child.partition(SEP)[2]
        if _index.valid_id(child_id):
            with contextlib.suppress(RunNotFound):
                status = store._raw(child_id).get("status", "pending")
                if str(status) not in TERMINAL:
                    return False
    journal_path = os.path.join(run_dir, JOURNAL_FILE)
    data = _fsops.read_bytes(journal_path)
    journal = data[: _journal.content_end(data, journal_path)]
    _journal.parse(journal, journal_path)  # damage stays where verify names it
    try:
        record: bytes | None = _fsops.read_bytes(
            os.path.join(run_dir, RUN_FILE), allow=(errno.ENOENT,)
        )
    except FileNotFoundError:
        record = None
    try:
        logs = _fsops.read_bytes(os.path.join(run_dir, LOGS_FILE), allow=(errno.ENOENT,))
        logs = logs[: logs.rfind(b"\n") + 1]  # a torn last line, as readers skip it
    except FileNotFoundError:
        logs = b""
    line = encode(run_id, Packed(record, journal, logs))
    if len(line) > LINE_LIMIT:
        return True
    lane = raw.get("group")
    if isinstance(lane, str):
        from wf.store._base import lane_key

        queue = raw.get("queue")
        # An ended run has left its lane unless a crash came first (see ``_upkeep._forget``).
        store.lanes.leave(
            lane_key(str(raw.get("workflow", "")), queue if isinstance(queue, str) else None, lane),
            run_id,
        )
    return line


def _lock_journal(run_dir: str) -> int | None:
    """The run's lease taken without waiting (the flock on its journal); None if held or gone."""
    try:
        fd = os.open(os.path.join(run_dir, JOURNAL_FILE), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _load_memo(store: LocalStore) -> dict[str, int]:
    path = os.path.join(store.segments.dir, "scan.json")
    try:
        data = orjson.loads(_fsops.read_bytes(path, allow=(errno.ENOENT,)))
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, int)}


def _save_memo(store: LocalStore, memo: dict[str, int]) -> None:
    # A hint: lost or stale, a pass lists a bucket again (stale: a bucket changed since has
    # another time, so it is listed anyway).
    _atomic.replace_cache(store.segments.dir, "scan.json", orjson.dumps(memo))


# -- unpacking ---------------------------------------------------------------------------------


def unpack(store: LocalStore, run_id: str, *, wait: bool = True) -> bool:
    """Give the packed run its directory back (see the module); False if it is not packed
    (a directory already, or no run). Without ``wait`` (a caller on the event loop),
    ``SegmentsBusy`` if another process holds the segments lock."""
    with store.segments.lock(wait=wait) as got:
        if not got:
            raise SegmentsBusy(f"cannot unpack run {run_id}: another process holds segments/lock")
        return unpack_held(store, run_id)


def unpack_held(store: LocalStore, run_id: str) -> bool:
    """``unpack``, the segments lock held by the caller."""
    run_dir = store.run_dir(run_id)
    if run_exists(run_dir):
        return False  # the directory wins (unpacked meanwhile, or a crash left both)
    loc = store.segments.locate(run_id)
    if loc is None:
        return False
    packed = store.segments.read(loc, run_id)
    staging = os.path.join(store.root, "tmp", f"unpack.{run_id}.{os.urandom(4).hex()}")
    try:
        _fsops.mkdir(staging)
    except StoreCorrupted as error:
        raise store._staging_damage(error) from error
    try:
        files = [(JOURNAL_FILE, packed.journal + _journal.slack(len(packed.journal)))]
        if packed.record is not None:
            files.append((RUN_FILE, packed.record))
        if packed.logs:
            files.append((LOGS_FILE, packed.logs))
        for name, data in files:
            path = os.path.join(staging, name)
            fd = _fsops.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                _fsops.write_all(fd, data, path)
                _fsops.fsync(fd, path)
            finally:
                _fsops.close(fd)
        _fsops.fsync_dir(staging)
        if os.path.lexists(run_dir):
            store._discard(run_dir)  # a leftover without data (``run_exists``)
        _fsops.rename(staging, run_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsops.fsync_dir(store.runs)
    store.segments.unlink(run_id)
    _fsops.fsync_dir(store.segments.links)
    store.segments.bury([loc])
    return True


# -- deleting ----------------------------------------------------------------------------------


def delete(
    store: LocalStore,
    run_ids: Sequence[str],
    now: float,
    reason: str,
    out: Deleted,
    forget: Callable[[LocalStore, str, dict[str, Any]], None],
) -> list[str]:
    """Delete the packed runs among ``run_ids``; returns those that turned out to have a
    directory (to be deleted as such). ``forget`` removes a run's entries outside its
    directory (``_upkeep._forget``). Tombstones first (fsynced), then the locators
    (``packed/`` fsynced), then the entries: a crash leaves a run that still exists beside
    its tombstone, or entries of no run, as for a directory."""
    others: list[str] = []
    with store.segments.lock():
        found: list[tuple[str, Loc, dict[str, Any]]] = []
        for run_id in run_ids:
            if run_exists(store.run_dir(run_id)):
                others.append(run_id)
                continue
            loc = store.segments.locate(run_id)
            if loc is None:
                continue
            try:
                raw = store.segments.read(loc, run_id).raw(store.run_location(run_id))
            except StoreCorrupted:
                continue  # verify names it; a damaged run is not deleted blind
            found.append((run_id, loc, raw))
        if not found:
            return others
        written = store.tombstones.add(
            [
                Tombstone(
                    run_id,
                    str(raw.get("workflow", "")),
                    str(raw.get("status")),
                    now,
                    reason,
                    int(raw.get("seq") or 0),
                )
                for run_id, _, raw in found
            ]
        )
        if not written and store.tombstones.short:
            raise store.tombstones.no_room()
        # The others: damage noted, or no room for their tombstones (the next gc, once the
        # runs deleted meanwhile made some).
        found = [item for item in found if item[0] in written]
        for run_id, _, _ in found:
            store.segments.unlink(run_id)
        _fsops.fsync_dir(store.segments.links)
        # The runs are gone first, their entries next: a crash in between leaves entries of
        # no run (readers skip them, verify removes them), never a run no listing has.
        for run_id, _, raw in found:
            forget(store, run_id, raw)
        store.segments.bury([loc for _, loc, _ in found])
        for run_id, loc, raw in found:
            store._seen.pop(run_id, None)
            store.counters.bump(str(raw["status"]), out=True)
            store.counters.bump("tombstones")
            out.ids.append(run_id)
            out.bytes += loc.length
        store.segments.reclaim()
    return others
