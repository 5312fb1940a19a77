"""``LocalStore``: runs as JSON files under ``.workflows``, guarded by file locks.

The layout is in ``_layout``, the crash-safety arguments in each module and in
``docs/store.md``. File operations are microsecond-scale syscalls and run on the event loop;
only the group commit's flush costs real time, and it is shared (``_commit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import errno
import fcntl
import functools
import itertools
import logging
import os
import random
import shutil
import stat
import time
import weakref
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Container,
    Iterable,
    Iterator,
    Sequence,
)
from pathlib import Path
from typing import Any, TypeVar

import orjson

from wf._exceptions import RunNotFound, StoreCorrupted, StoreError, UsageError
from wf._files import FILES_PER_RUN, open_files_limit
from wf._tasks import in_thread_alone, in_thread_to_the_end
from wf.store._base import (
    CREATOR_LEASES,
    MINTED_ID,
    Deleted,
    Event,
    HookRecord,
    InboxMessage,
    Lease,
    LogEntry,
    Pins,
    Progress,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleLock,
    Slot,
    Store,
    StoreStats,
    Tombstone,
    WebhookDelivery,
    lane_of,
    stamp_seq,
)
from wf.store._decode import checked_message
from wf.store._faults import item_own, out_of_files
from wf.store._ids import new_run_id, validate_run_id
from wf.store.local import (
    _atomic,
    _compact,
    _format,
    _fsops,
    _journal,
    _logs,
    _records,
    _streams,
    _tails,
    _upkeep,
    _waitlock,
)
from wf.store.local._commit import Committer, committer_for, sync_owed
from wf.store.local._counts import Counters
from wf.store.local._creations import LIMIT, CreationLog
from wf.store.local._hooks import Hooks
from wf.store.local._index import Index, Tag, record_tags
from wf.store.local._lanes import Lanes, Rates, Slots
from wf.store.local._layout import (
    FORMAT,
    INBOX_DIR,
    JOURNAL_FILE,
    LOCK_FILE,
    LOCKS_JOURNAL,
    RUN_FILE,
    STAGING_DIR,
    TEMP_AGE,
    digest,
    index_name,
    no_staging,
    queue_name,
    record_due,
    record_tag,
    run_exists,
    run_present,
    staging_kind,
    stream_key,
)
from wf.store.local._lease import LocalLease
from wf.store.local._notify import hub_for, poll_interval
from wf.store.local._offloop import flusher_for
from wf.store.local._queue import (
    SEQ_TAG,
    Queue,
    pin_hashes,
    queue_hashes,
    raw_tag,
    tags_of,
    tags_of_record,
)
from wf.store.local._segments import Loc, Packed, Segments, SegmentsBusy
from wf.store.local._sequence import CreationSequence, Unnumbered

log = logging.getLogger("wf.worker")


_Fingerprint = tuple[tuple[str, int, int, int], ...]
_T = TypeVar("_T")

OFF_LOOP_BYTES = 1 << 20
"""A journal read that would parse more than this many bytes (about 12,000 events) is parsed
in a thread, so that the event loop serves everything else meanwhile."""

HELD_RETRY = 0.25
"""Seconds during which a claim does not try again a run it found held by another driver."""

HEAR_INBOXES_AFTER = 0.2
"""Seconds a run is watched (``watch_inbox``) before the watcher of ``queue/`` is started for
it, in a process where nothing started it yet (no worker): a cancel from another process
reaches a younger run at this delay, an older one at once."""

_COME_BACK = (("", "", False),)
"""What ``LocalStore.claim`` puts between the queue's order and the runs it passed over."""

LISTED_RUNNING_MAX = 10_000
"""Runs ``Hub.listed_running`` holds before those it has held ``LISTED_RUNNING_FORGET`` seconds
are forgotten (each is then passed over once more, for ``HELD_RETRY``)."""

LISTED_RUNNING_FORGET = 60.0
"""Seconds after which ``Hub.listed_running`` may forget a run, once past its size."""

HELD_RETRIES = 200
"""Runs found held a claim tries again at most, those tried longest ago first. With thousands
of runs driven elsewhere, trying every one of their locks again each ``HELD_RETRY`` made a
claim take about 90 ms every quarter second (3,000 held); past this many, a held run is tried
again once the claims have come round to it."""


_NOT_THERE = (errno.ENOENT, errno.ENOTDIR)
"""A journal's ``open`` failures that say the run has none (packed, gone): looked for then."""


class _Miss(enum.Enum):
    """Why ``_acquire`` took no lease."""

    HELD = "held"
    """Another driver holds the run's lock."""
    GONE = "gone"
    """The queue entry the caller listed is gone: the run moved on since."""
    UNWANTED = "unwanted"
    """The caller's test of the run's record said no (given back before anything was
    brought in line with the record: that is the driver's to do)."""


_STATUSES = frozenset(status.value for status in RunStatus)

_READ_ON_LOOP = 256 * 1024
"""A stream read of more bytes is made in a thread: a thread hop costs about what reading this
much costs (a follower of a chatty stream reads a few bytes at a time, on the loop)."""


class LocalStore(Store):
    """The default store: a directory (``.workflows``) of JSON files and file locks.

    Safe for any number of processes on one machine. The directory is created on the first
    write; reads of a store that does not exist yet find nothing.
    """

    claims_lane_heads = True
    filters_deployments = True

    def __init__(self, path: str | Path | None = None, *, creation_log: bool = False) -> None:
        """``creation_log``: a prototype (``_creations``): creations are made durable by an
        append to one log instead of a ``syncfs``, and a run's names by its lease's first
        flush. Needs syncfs; the default layout is used without it. Off by default: see
        ``docs/performance.md``, "Creation log prototype"."""
        self.path = Path(path) if path is not None else _format.default_store_path()
        self.root = os.path.realpath(os.path.abspath(self.path))
        self.runs = os.path.join(self.root, "runs")
        self._interval, self._events = poll_interval()
        self.hub = hub_for(self.root)
        self._counts_subdirectories: bool | None = None
        """Whether the store's file system counts subdirectories in a directory's link count
        (``_fsops.counts_subdirectories``), once a lease asked."""
        self._said_out_of_files = False
        # Waits that poll compare inode numbers too; with events, a count of changes does.
        self.queue = Queue(self.root, inodes=not self._events, hub=self.hub)
        self.index = Index(self.root)
        self.hooks = Hooks(self.root, self.faults)
        self.lanes = Lanes(self.root, self.faults)
        self.sequence = CreationSequence(self.root)
        self.slots = Slots(self.root, self.faults)
        self.rates = Rates(self.root)
        self.schedules = _upkeep.Schedules(self.root, self.faults)
        self._schedule_news = self.hub.subscribe_schedules()
        self._schedule_view: dict[str, Schedule] | None = None
        """File name -> schedule, as last read: ``due_schedules`` reads again only the files
        the file-system events (or this process's saves) named since."""
        self.tombstones = _upkeep.Tombstones(self.root, self.faults)
        self.counters = Counters(self.root)
        self.segments = Segments(self.root)
        self.log = CreationLog(self.root) if creation_log and _fsops.HAVE_SYNCFS else None
        self._ready = False
        self._using: list[int] | None = None
        """This store's share of the process's hold on ``users.lock`` (``_format.hold_use``)."""
        self._schedules_made = False
        self._lock_files = False
        """A format-1 store: runs have a ``lock`` file, and a lease locks it too."""
        self._closed = False
        self._seen: dict[str, _Fingerprint] = {}
        self._full_lanes: dict[str, tuple[frozenset[str], int]] = {}
        """Lane hash -> the heads (and width) of a full lane as last listed (``_lane_heads``)."""
        self._young: dict[str, float] = {}
        """Finished runs a compaction pass found ended too recently to pack, and when they
        ended: later passes leave them alone until they are old enough (``_compact``)."""
        self._unheard: dict[object, float] = {}
        """Inboxes watched (``watch_inbox``) while the watcher of ``queue/`` does not run, by a
        key of each watch: the loop time it began, oldest first."""
        self._hear_timer: asyncio.TimerHandle | None = None
        """The one timer that starts the watcher when the oldest of them is old enough
        (``_hear_inboxes``), and its loop: a timer per run cost each one a handle and its
        place in the loop's heap, pushed and popped among every other run's."""
        self._hear_loop: asyncio.AbstractEventLoop | None = None
        self._tails = _tails.Tails()
        """Where recently read journals' and logs' complete lines end (``read_journal``'s and
        ``read_logs``'s ``start``)."""
        self._created: dict[str, tuple[int, bytes | None]] = {}
        """Runs created here and not leased since: where their journal's content ended at
        creation, and its bytes when it is all the run has (no ``run.json``): a lease taken
        while the journal still ends there (slack follows) then reads neither back
        (``_acquire``)."""
        self._leased_at_creation: dict[str, LocalLease] = {}
        """Leases ``create_run`` took for the run's creator while its flush ran
        (``CREATOR_LEASES``), until its ``try_acquire`` takes them (right after)."""

    def __repr__(self) -> str:
        return f"LocalStore({str(self.path)!r})"

    # -- opening ---------------------------------------------------------------------------

    def _open(self, *, create: bool) -> bool:
        """Check the format (once); create the store if asked. False if it does not exist."""
        if self._ready:
            return True
        version = _format.check_format(self.root)
        if version is not None:
            _format.warn_if_network(self.root)
            if version < FORMAT:
                _format.migrate(self.root, version)
        elif create:
            _format.initialize(self.root)
            version = _format.check_format(self.root) or FORMAT  # another process may have won
        else:
            return False
        # Held until the process exits, so that a newer wf's upgrade waits for it; taken
        # while one upgrades, it waits, and the format is read again (a newer one: refused).
        self._using = _format.hold_use(self.root)
        version = _format.check_format(self.root) or version
        self._lock_files = version < LOCKS_JOURNAL or _format.keeps_lock_files(self.root)
        self._device = os.stat(self.root).st_dev
        # Opened before this store writes anything its flushes must cover (``_fsops.mark``).
        _fsops.file_system(self.root, self._device)
        self._ready = True
        self._sweep_staging()
        if self.log is not None:
            self.checkpoint(recover=True)
        return True

    def checkpoint(self, *, recover: bool = False) -> bool:
        """Creation log: make every logged run durable (one syncfs), then empty the log.

        ``recover`` (a store's first use in a process: a power cut may have come before):
        first create again every logged run the cut lost or left without data (unless a
        tombstone says it was deleted since), and give the others the queue and index entries
        their records imply. Without a cut nothing is lost: the syncfs is enough. Returns
        False if another process (or a creation of ours in flight) holds the log: the log is
        left for later, but ``recover`` still recovers (a creator publishes its run before it
        logs it, so a logged run that is missing was lost, not in the making). Also False,
        the log kept, if a whole flush of the file system failed since a logged run wrote
        its names (``_fsops.FileSystem``).
        """
        assert self.log is not None
        with self.log.exclusive() as entries:
            if entries is None:
                if recover:
                    self._recover(self.log.entries())
                return False
            if entries:
                if recover:
                    self._recover(entries)
                if _fsops.mark(self.root, self._device) != self.log.since:
                    # A whole flush of the file system failed since a logged run wrote its
                    # names: no later flush can vouch for them. The log stays, for the
                    # recovery of the store's first use in the next process.
                    return False
                _fsops.barrier(self.root, self.log.since)  # every logged run's names and bytes
                self.log.clear()
        return True

    def _recover(self, entries: list[dict[str, Any]]) -> None:
        dropped = {e["drop"] for e in entries if "drop" in e}
        numbers = [int(e["record"].get("seq") or 0) for e in entries if "record" in e]
        if numbers:
            # Logged numbers were taken from the sequence, whose own bump may not have reached
            # the disk (the log line was the creation's only flush): never give them again.
            self.sequence.at_least(max(numbers))
        repaired = False
        since = _fsops.mark(self.root, self._device)
        for entry in entries:
            if "record" not in entry or entry["record"].get("id") in dropped:
                continue
            record = RunRecord.from_json(entry["record"])
            run_dir = self.run_dir(record.id)
            if run_exists(run_dir) and not _records.cut_short(run_dir):
                self._restore_entries(record.id, run_dir)
            elif self.segments.locate(record.id) is not None:
                continue  # packed since: it ended long after its creation was durable
            elif self.tombstones.get(record.id) is None:
                if os.path.exists(run_dir):
                    self._discard(run_dir)
                staging = os.path.join(
                    self.root, "tmp", f"{record.id}.{os.getpid()}.{os.urandom(4).hex()}"
                )
                self._publish(record, entry.get("events") or [], staging, run_dir)
                repaired = True
        if repaired:
            _fsops.barrier(self.root, since)

    def _restore_entries(self, run_id: str, run_dir: str) -> None:
        """The queue and index entries of an existing logged run, as its record implies (a
        crash may have kept the run and lost them: they were never synced on their own)."""
        try:
            fd = _fsops.open_fd(os.path.join(run_dir, JOURNAL_FILE), os.O_RDONLY)
        except StoreError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # driven now: its lease reconciled the entries when it was taken
            record = RunRecord.from_json(_records.read_raw(run_dir, run_id))
            due = record_due(record.status, record.wake_at, record_tag(record))
            if due is not None and not self.queue.known_names(run_id):
                self.queue.add(due, run_id)
            name = index_name(record.seq, run_id, record.status, record.workflow, record.parent_id)
            self.index.set(record.seq, run_id, name, sync=False)
            if record.parent_id is not None:
                self.index.add_child(record.parent_id, record.seq, run_id)
        finally:
            _fsops.close(fd)

    def _sweep_staging(self) -> None:
        staging = os.path.join(self.root, "tmp")
        _format.drop_aside(self.root)  # an upgrade's leftovers, removed on a thread
        try:
            names = _fsops.listdir(staging, allow=(errno.ENOENT, errno.ENOTDIR))
        except NotADirectoryError:
            # A file where ``tmp/`` belongs: verify names it; what needs ``tmp/`` (a deletion,
            # a new index entry) fails naming it. Reads, verify among them, go on.
            return
        for name in names:
            path = os.path.join(staging, name)
            # ``names`` is the file entries link to (``_atomic.EmptyNames``); an upgrade's
            # leftovers are being removed above. A name wf never makes there, or one of the
            # wrong kind, is someone's: left, and named by ``wf store verify`` (``_strays``).
            made = staging_kind(name)
            if name == "names" or made is None:
                continue
            with contextlib.suppress(OSError):
                found = os.lstat(path)
                if time.time() - found.st_mtime <= TEMP_AGE:
                    continue
                if made and stat.S_ISDIR(found.st_mode):
                    shutil.rmtree(path, ignore_errors=True)
                elif not made and stat.S_ISREG(found.st_mode):
                    os.unlink(path)  # ``names.full.*``: rmtree passed a file by

    def run_dir(self, run_id: str) -> str:
        """The run's directory (the id is validated first: it becomes a path)."""
        return self.runs + os.sep + validate_run_id(run_id)  # no separator: validated

    def _find(self, run_id: str) -> tuple[str, Loc | None]:
        """The directory of a run that exists, and where it is packed if it has none
        (``_segments``); else ``RunNotFound``. A directory wins over a locator."""
        try:
            run_dir = self.run_dir(run_id)
        except UsageError:
            raise RunNotFound(run_id) from None  # a malformed id names no run
        if not self._open(create=False):
            raise RunNotFound(run_id)
        if run_exists(run_dir):
            _fsops.refuse_link(run_dir)
            return run_dir, None
        _fsops.refuse_link(run_dir)  # a link to nowhere is no missing run either
        loc = self.segments.locate(run_id)
        if loc is None:
            if run_exists(run_dir):
                return run_dir, None  # unpacked between the two looks
            raise RunNotFound(run_id)
        return run_dir, loc

    def _existing(self, run_id: str, *, wait: bool = True) -> str:
        """The directory of a run that exists, unpacked first if it is packed (for whatever
        writes to the run); else ``RunNotFound``. Without ``wait`` (on the event loop),
        ``SegmentsBusy`` if the run is packed and another process holds the segments lock:
        the caller unpacks it off the loop (``_unpack``) and tries again."""
        run_dir, loc = self._find(run_id)
        if loc is not None:
            _compact.unpack(self, run_id, wait=wait)
            run_dir, loc = self._find(run_id)
            if loc is not None:
                raise StoreError(f"run {run_id} is packed and could not be unpacked")
        return run_dir

    def _read(
        self,
        run_id: str,
        from_dir: Callable[[str], _T],
        from_packed: Callable[[Packed, str], _T],
        found: tuple[str, Loc | None] | None = None,
    ) -> _T:
        """Read the run from its directory or its segment line, whichever it has. A run
        packed, unpacked or moved by a segment's rewrite between the look and the read is
        looked for again. ``found``: what ``_find`` just said, for the first look."""
        for attempt in range(3):
            run_dir, loc = found if found is not None and attempt == 0 else self._find(run_id)
            try:
                if loc is None:
                    return from_dir(run_dir)
                return from_packed(self.segments.read(loc, run_id), run_dir)
            except (RunNotFound, StoreError):
                if attempt == 2 or not self._moved(run_id, run_dir, loc):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _moved(self, run_id: str, run_dir: str, loc: Loc | None) -> bool:
        """Whether the run is no longer where ``_find`` found it."""
        if loc is None:
            return not run_exists(run_dir)
        return run_exists(run_dir) or self.segments.locate(run_id) != loc

    def _raw(self, run_id: str) -> dict[str, Any]:
        """The stored JSON of the run's record, packed or not (large values not loaded)."""
        return self._read(
            run_id,
            lambda run_dir: _records.read_raw(run_dir, run_id),
            lambda packed, run_dir: packed.raw(run_dir),
        )

    def _load(self, run_id: str, *, blobs: bool) -> RunRecord:
        """The run's record, packed or not (``_records.load``)."""
        return self._read(
            run_id,
            lambda run_dir: _records.load(run_dir, run_id, blobs=blobs, found=True),
            lambda packed, run_dir: RunRecord.from_json(packed.raw(run_dir), run_id),
        )

    # -- runs ------------------------------------------------------------------------------

    async def create_run(
        self, record: RunRecord, events: Sequence[Event] = (), *, explicit: bool = False
    ) -> bool:
        """Create the run, fully formed, or return False if the id exists (or, ``explicit``,
        has a tombstone: ``Store.create_run``).

        The run is assembled in ``tmp/`` and renamed into ``runs/`` in one step, so readers see
        all of it or none of it. Its queue and index entries are written *before* that rename:
        an entry whose run does not exist (yet, or ever, after a crash) is skipped by readers.

        Durability: with syncfs, nothing is fsynced file by file. The run is published, then
        one flush of the file system, shared through the group commit with every other
        creation and append in flight, makes all of it durable before this returns. A power
        cut before that flush can leave a published directory without data, which
        ``run_exists`` does not count as a run (it was never reported created). If the flush
        fails, the run is taken back out of ``runs/``. Without syncfs every file and directory
        is fsynced before the rename, and ``runs/`` after it.
        """
        # Its creator leases it next (``CREATOR_LEASES``): taken while the flush runs, if it
        # runs in the thread (``take_lease``), and handed to the creator's ``try_acquire``.
        lease = CREATOR_LEASES.get() == record.id
        run_dir = self.run_dir(record.id)
        if record.parent_id is not None:
            validate_run_id(record.parent_id)
        self._open(create=True)
        # An id made for this creation (``MINTED_ID``) is nobody's: no look for a run under it
        # (an ``lstat`` and a ``readlink``). The rename that publishes the run still refuses a
        # directory there.
        if MINTED_ID.get() != record.id and not self._free(run_dir, record.id):
            return False
        if explicit and self.tombstones.get(record.id) is not None:
            return False  # deleted: the id is still that run's
        staging = os.path.join(self.root, "tmp", _staging_name(record.id))
        since = _fsops.mark(self.root, self._device)  # before anything its flush must cover
        # On the loop thread: staging in a worker thread was measured slower (creations then
        # finish at different times and need more flushes, 9-10k vs 13-14k steps/s at 100).
        try:
            published = self._publish(record, events, staging, run_dir, number=True)
        except Unnumbered:
            # The sequence holds no number (damaged): the highest in use is scanned off the
            # loop, without its lock (``prepare``), and the creation made again with it.
            in_use = await asyncio.to_thread(self.sequence.prepare)
            published = self._publish(record, events, staging, run_dir, number=True, in_use=in_use)
        if published is None:
            return False  # another process created it first (our names are taken back)
        owed, journal, events = published
        taken: LocalLease | None = None
        # The run's count: bumped while its flush runs in the thread (``meanwhile``), not
        # between that flush and the next creation, when the disk has nothing to do; else
        # after the flush. A cache (``_counts``), so no flush waits for it; taken back if the
        # flush fails, and its own failure is the creation's once the flush is done, as when
        # it was bumped after it.
        count: list[BaseException | None] = []
        if owed:
            try:
                committer = committer_for(asyncio.get_running_loop())
                if self.log is not None and record.group is None:
                    await self._log_creation(committer, record, events, since)
                else:
                    # What was staged is now under the run's own name, and the rename is a
                    # name in ``runs/``: both owed to a flush that goes file by file.
                    moved = [run_dir + p[len(staging) :] if _under(p, staging) else p for p in owed]

                    def meanwhile() -> None:
                        nonlocal taken
                        try:
                            self.counters.bump(record.status.value)
                        except BaseException as error:  # ``meanwhile`` must not raise
                            count.append(error)
                        else:
                            count.append(None)
                        if lease:
                            taken = self._lease_created(record.id, journal, committer)

                    await committer.sync_file_system(
                        self.root, self._device, since, [*moved, self.runs], meanwhile
                    )
            except BaseException:
                # Not durable, maybe never will be: unpublish rather than leave a run whose
                # creation was reported failed, and its names with it (once it is out: a
                # run that stays has its names), its lease first if one was taken meanwhile.
                if taken is not None:
                    with contextlib.suppress(StoreError):
                        taken.abandon()
                try:
                    os.rename(run_dir, staging)
                except OSError:
                    pass  # the run stays (counted if its count was made; verify repairs)
                else:
                    self._take_back(record)
                    if count == [None]:
                        with contextlib.suppress(StoreError):
                            self.counters.bump(record.status.value, out=True)
                shutil.rmtree(staging, ignore_errors=True)
                raise
        else:
            _fsops.fsync_dir(self.runs)
        try:
            if count and count[0] is not None:
                raise count[0]
            self._after_creation(record, journal, taken is None, counted=bool(count))
        except BaseException:
            # The run is created and durable, but its creator is told it failed and will not
            # take the lease taken for it: let go, or no driver could ever take the run.
            if taken is not None:
                with contextlib.suppress(StoreError):
                    taken.abandon()
            raise
        if taken is not None:  # the creator's, for its ``try_acquire`` (right after)
            self._leased_at_creation[record.id] = taken
        return True

    def _free(self, run_dir: str, run_id: str) -> bool:
        """Whether a creation may use ``run_id``: no run, link or packed run stands under it
        (a leftover of a creation cut short by a power cut is discarded)."""
        try:
            found = os.lstat(run_dir)  # one look for both a link and a leftover
        except OSError:
            pass  # nothing there (or nothing to see: publishing will say what is wrong)
        else:
            if stat.S_ISLNK(found.st_mode):
                # Something stands under the id: not created. Reading it (``get_run``) names
                # the damage to whoever started this id, where a creation's damage would be
                # the store's (a child's parent kept due, for nothing, until the repair).
                return False
            if run_exists(run_dir) and not _records.cut_short(run_dir):
                return False
            self._discard(run_dir)  # a leftover of a creation cut short by a power cut
        try:
            return self.segments.locate(run_id) is None  # else packed
        except StoreCorrupted:
            return False  # a damaged locator of the id: the same as a link above

    def _after_creation(
        self,
        record: RunRecord,
        journal: tuple[int, bytes | None],
        first_lease: bool,
        *,
        counted: bool = False,
    ) -> None:
        """What follows a durable creation: the creation log's checkpoint, the counters
        (unless ``counted`` while its flush ran), and the caches and wake-ups of this process
        (``first_lease``: keep the journal read for the run's first lease, wherever taken:
        ``_acquire_once``)."""
        if self.log is not None and self.log.idle() and self.log.size() > LIMIT:
            # After the creation is durable (its line), and no part of it: a checkpoint that
            # fails keeps the log for later, and the run stays created.
            try:
                self.checkpoint()
            except StoreError as error:
                log.warning("creation log %s kept: %s", self.log.path, error)
        if not counted:
            self.counters.bump(record.status.value)
        if len(self._created) > 4096:
            self._created.clear()
        if first_lease:
            self._created[record.id] = journal
        self.queue.remember(record.id, tags_of(record.queue, lane_of(record), record.limits))
        self.hub.touch("")
        self.hub.touch(record.id)

    def _lease_created(
        self, run_id: str, journal: tuple[int, bytes | None], committer: Committer
    ) -> LocalLease | None:
        """The lease of a run this call's creation has just published (``journal``: its size
        and bytes, ``_stage``'s), as ``try_acquire`` takes it; None if it cannot be taken now
        (the caller's own ``try_acquire`` then meets whatever stopped it). ``committer``: the
        creation's, the lease's too (looked up once: a lookup of the running loop asks the
        process id, a system call)."""
        self._created[run_id] = journal
        try:
            got = self._acquire(run_id, committer=committer)
        except Exception:
            return None
        finally:
            self._created.pop(run_id, None)  # taken (or not): its caller tries again
        return got if isinstance(got, LocalLease) else None

    async def _log_creation(
        self, committer: Any, record: RunRecord, events: Sequence[Event], since: int
    ) -> None:
        """Make a published creation durable by one flushed line in the creation log
        (``since``: the ``_fsops.mark`` taken before the creation wrote).

        Not for runs in a lane: their lane entry must be durable before the run counts
        (``Lanes.join``), which takes the file-system flush anyway.
        """
        assert self.log is not None
        with self.log.appending() as fd:
            self.log.append(fd, record.to_json(), list(events), since)
            try:
                await committer.commit(fd, self.log.path, self._device, since)
            except BaseException:
                # The line may be on disk: a checkpoint must not bring the run back.
                self.log.drop(fd, record.id, committer)
                raise

    def _publish(
        self,
        record: RunRecord,
        events: Sequence[Event],
        staging: str,
        run_dir: str,
        *,
        number: bool = False,
        in_use: int | None = None,
    ) -> tuple[list[str], tuple[int, bytes | None], list[Event]] | None:
        """Stage the run, write its queue and index entries, rename it into ``runs/``.

        ``number``: give the run the next number of the creation sequence first (its bump
        made durable by the same deferred flush); else the record has one (a recovery).
        ``in_use``: the highest number in use, scanned off the loop for a damaged sequence;
        without it, a damaged one raises ``Unnumbered`` (nothing of the run left). Returns the
        fsyncs deferred to the caller's flush (empty without syncfs: each was
        made), the journal's size and bytes (see ``_stage``) and the events as written, or
        None if the id was taken meanwhile.
        """
        try:
            _fsops.mkdir(staging)
        except StoreCorrupted as error:
            raise self._staging_damage(error) from error
        published = False
        named = False  # names outside ``staging`` may have been written: taken back below
        try:
            with _fsops.deferred_fsyncs() as owed:
                if number:
                    # Not scanned here, under the lock on the loop: ``Unnumbered`` (the caller's).
                    events = stamp_seq(record, events, self.sequence.take(in_use, scan=False))
                seq = record.seq
                journal = self._stage(staging, record, events)
                named = True
                lane = lane_of(record)
                if lane is not None:
                    self.lanes.join(lane, record.id, lambda: seq)
                due = record_due(record.status, record.wake_at, record_tag(record))
                if due is not None:
                    self.queue.add(due, record.id)
                    self.queue.sync()
                name = index_name(seq, record.id, record.status, record.workflow, record.parent_id)
                tags = record_tags(record.queue, record.group, record.deployment)
                self.index.add(seq, name, tags, record.workflow)
                if record.parent_id is not None:
                    self.index.add_child(record.parent_id, seq, record.id)
            try:
                _fsops.rename(staging, run_dir, allow=(errno.ENOTEMPTY, errno.EEXIST))
            except OSError:
                return None  # taken by another creator: our names (our number) go
            published = True
            return owed, journal, list(events)
        finally:
            if not published:
                shutil.rmtree(staging, ignore_errors=True)
                if named:
                    self._take_back(record)

    def _take_back(self, record: RunRecord) -> None:
        """Remove the names a creation of ``record`` (numbered) wrote outside its run's
        directory, which is not published (or was moved back out: its flush failed): its
        lane, queue and index entries and its entry under its parent, each by its name. Best
        effort, on the way out of a failure that is the one to raise: a removal that fails
        too leaves an entry of no run, which readers skip and verify removes (after
        ``ORPHAN_AGE``), as after a crash. Not synced, for the same reason."""
        lane = lane_of(record)
        due = record_due(record.status, record.wake_at, record_tag(record))
        name = index_name(record.seq, record.id, record.status, record.workflow, record.parent_id)
        tags = record_tags(record.queue, record.group, record.deployment)
        removals: list[Callable[[], object]] = [
            lambda: self.index.withdraw(record.seq, name, tags, record.parent_id)
        ]
        if lane is not None:
            removals.append(lambda: self.lanes.withdraw(lane, record.id, record.seq))
        if due is not None:
            removals.append(lambda: self.queue.remove(due, record.id))
        for remove in removals:  # each on its own: one that fails leaves the others to go
            try:
                remove()
            except Exception as error:  # never over the creation's own failure
                log.debug("a name of run %s not taken back: %s", record.id, error)

    def _can_stage(self) -> bool:
        """Whether ``tmp/``, where a deletion or a packing moves a run's directory, is a
        directory; if not, the damage is noted once (``faults``: ``wf gc`` names it, a worker
        logs it) and the caller passes over the runs that have a directory before writing
        anything of theirs (a tombstone, a segment line)."""
        error = no_staging(self.root)
        if error is None:
            return True
        self.faults.note(
            "store directory", STAGING_DIR, os.path.join(self.root, STAGING_DIR), error
        )
        return False

    def _staging_damage(self, error: StoreCorrupted) -> StoreError:
        """``error``, met making a name in ``tmp/``, or the store's own line naming ``tmp``
        when a file stands there (``no_staging``): the damage is the store's, not the run's.
        Told only once a write there failed: a creation asks no ``stat`` up front."""
        return no_staging(self.root) or error

    def _discard(self, run_dir: str) -> None:
        """Move a leftover run directory out of ``runs/`` and delete it."""
        trash = os.path.join(self.root, "tmp", f"leftover.{os.getpid()}.{os.urandom(4).hex()}")
        try:
            _fsops.rename(run_dir, trash, allow=(errno.ENOENT,))
        except FileNotFoundError:
            return  # another creator discarded it first
        except StoreCorrupted as error:
            raise self._staging_damage(error) from error
        if run_exists(trash) and not _records.cut_short(trash):
            # That creator has published its run meanwhile: what we moved is a run. Put it
            # back (our own rename will then find the id taken).
            with contextlib.suppress(OSError):
                os.rename(trash, run_dir)
            return
        shutil.rmtree(trash, ignore_errors=True)

    def _stage(
        self, staging: str, record: RunRecord, events: Sequence[Event]
    ) -> tuple[int, bytes | None]:
        """Write the run's files into ``staging``; returns where the journal's content ends
        (its slack follows) and, when the journal alone gives the record back (no
        ``run.json``), that content."""
        journal = staging + os.sep + JOURNAL_FILE
        content = _journal.encode(events, journal)
        files = [(journal, content + _journal.slack(len(content)))]
        known: bytes | None = content
        if self._lock_files:
            files.append((staging + os.sep + LOCK_FILE, b""))
        if _records.needs_file(record, events[:1]):
            known = None
            record_data, _ = _records.encode(record, staging, sync_dir=False)
            files.append((staging + os.sep + RUN_FILE, record_data))
        for path, data in files:
            fd = _fsops.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                if data:
                    _fsops.write_all(fd, data, path)
                    _fsops.fsync(fd, path)
            finally:
                _fsops.close(fd)
        # No inbox directory yet: the first post makes it (most runs never get a message).
        _fsops.fsync_dir(staging)
        return len(content), known

    async def get_run(self, run_id: str) -> RunRecord:
        """The run's exact record (large values loaded back from their blobs)."""
        found = self._find(run_id)
        run_dir = found[0]
        look = _look(run_dir)  # *before* the read, so a change racing the read still shows
        if found[1] is not None or any(name == RUN_FILE for name, *_ in look):
            self._remember_look(run_id, run_dir, look)
            return self._read(
                run_id,
                lambda run_dir: _records.load(run_dir, run_id, found=True),
                lambda packed, run_dir: RunRecord.from_json(packed.raw(run_dir), run_id),
                found,
            )
        # No ``run.json`` (most runs): the record is rebuilt from the journal's ends, and how
        # far that read found the journal written is the fingerprint's (a result() of an ended
        # run read its tail twice). That read is no older than the look: a change made since
        # the read still shows, one made between the look and the read shows too (its mtime)
        # though the record has it already. Any other read (a ``run.json`` made meanwhile)
        # gives no length: -1 matches none, so the next wait looks again at once (a length
        # read after the read could already hold an append the record lacks).
        journal = run_dir + os.sep + JOURNAL_FILE
        _journal.last_written(journal)  # what an earlier read left is not this one's
        try:
            return self._read(
                run_id,
                lambda run_dir: _records.load(run_dir, run_id, found=True),
                lambda packed, run_dir: RunRecord.from_json(packed.raw(run_dir), run_id),
                found,
            )
        finally:
            written = _journal.last_written(journal)
            self._remember_look(run_id, run_dir, look, -1 if written is None else written)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        limit: int = 50,
        before: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> list[RunRecord]:
        """Newest first, from the index; large ``input``/``output`` values come back as None.

        Read in a worker thread: a filter that matches few runs reads many index names, and
        a server's other requests must not wait behind it on the event loop.
        """
        if limit <= 0 or not self._open(create=False):
            return []
        tags = record_tags(queue, group, deployment)
        return await asyncio.to_thread(
            self._list_runs, statuses, workflow, limit, before, parent_id, tags
        )

    def _list_runs(
        self,
        statuses: Sequence[RunStatus] | None,
        workflow: str | None,
        limit: int,
        before: str | None,
        parent_id: str | None,
        tags: list[Tag],
    ) -> list[RunRecord]:
        wanted = {RunStatus(s).value for s in statuses} if statuses else None
        below = None if before is None else self._seq_of(before)
        if below == 0:
            return []  # no such run ever existed: nothing was created before it
        candidates: Iterable[str]
        if parent_id is not None:
            try:
                validate_run_id(parent_id)
            except UsageError:
                return []  # not a run id: no run has it as parent
            candidates = self.index.children_of(parent_id, below)
        elif tags and self.index.tags_ready():
            wf_hash = digest(workflow, 8) if workflow is not None else None
            rare = wanted is not None and self._rare(wanted)
            candidates = self.index.tagged(tags, below, wanted, wf_hash, rare)
        else:
            wf_hash = digest(workflow, 8) if workflow is not None else None
            candidates = (e[0] for e in self.index.walk(below, wanted, wf_hash))
        fields = dict(tags)
        out: list[RunRecord] = []
        seen: set[str] = set()
        for run_id in candidates:
            if run_id in seen:
                continue
            record = self._listed(run_id)
            if record is None or _after(record, below):
                continue
            if wanted is not None and record.status.value not in wanted:
                continue
            if workflow is not None and record.workflow != workflow:
                continue
            if parent_id is not None and record.parent_id != parent_id:
                continue
            if fields and (
                fields.get("q", record.queue) != record.queue
                or fields.get("g", record.group) != record.group
                or fields.get("d", record.deployment) != record.deployment
            ):
                continue
            seen.add(run_id)
            out.append(record)
            if len(out) >= limit:
                break
        return out

    def _listed(self, run_id: str) -> RunRecord | None:
        """The run's record for a listing (packed or not, large values left out); None for a
        run being created (or a crashed creation's leftover entry) and for a damaged one,
        which is noted in ``faults`` and left out: one damaged run never hides the others."""
        record: RunRecord | None = None
        try:
            with self.faults.contain("run", run_id, lambda: self._damaged_where(run_id)):
                loaded = self._load(run_id, blobs=False)
                run_dir = self.run_dir(run_id)
                if not loaded.status.is_terminal and os.path.isdir(run_dir):
                    # Its record reads, but a run still to be driven needs its journal too:
                    # one gone (deleted by fsck) or replaced is said here, not found by a
                    # worker only.
                    _fsops.check_present(os.path.join(run_dir, JOURNAL_FILE))
                record = loaded
        except RunNotFound:
            return None
        return record

    async def search_runs(
        self,
        text: str,
        *,
        limit: int,
        budget: int,
        before: str | None = None,
        statuses: Sequence[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        queue: str | None = None,
        group: str | None = None,
        deployment: str | None = None,
    ) -> tuple[list[RunRecord], str | None, int]:
        """Looks at index names, which carry the id and the workflow's hash: only matches'
        records are read (a name costs about a microsecond, a record a hundred). Filters the
        names do not carry (parent, queue, group, deployment) read records as the default
        does."""
        if parent_id is not None or queue or group or deployment:
            return await super().search_runs(
                text,
                limit=limit,
                budget=budget,
                before=before,
                statuses=statuses,
                workflow=workflow,
                parent_id=parent_id,
                queue=queue,
                group=group,
                deployment=deployment,
            )
        if limit <= 0 or not self._open(create=False):
            return [], None, 0
        names = await self.workflow_names() or []
        hashes = {digest(name, 8) for name in names if text in name.lower()}
        wanted = {RunStatus(s).value for s in statuses} if statuses else None
        return await asyncio.to_thread(
            self._search_runs, text, hashes, limit, budget, before, wanted, workflow
        )

    def _search_runs(
        self,
        text: str,
        hashes: set[str],
        limit: int,
        budget: int,
        before: str | None,
        wanted: set[str] | None,
        workflow: str | None,
    ) -> tuple[list[RunRecord], str | None, int]:
        below = None if before is None else self._seq_of(before)
        if below == 0:
            return [], None, 0  # no such run ever existed: nothing was created before it
        wf_hash = digest(workflow, 8) if workflow is not None else None
        found: list[RunRecord] = []
        looked, cursor, at, checked = 0, None, 0, False
        seen: set[str] = set()
        entries = self.index.walk_numbered(below, wanted, wf_hash)
        for seq, (run_id, _status, name_hash, _parent) in entries:
            if run_id in seen:
                continue
            if (looked >= budget or len(found) == limit) and cursor is not None:
                if checked or self._seq_of(cursor) == at:
                    return found, cursor, looked
                cursor = None  # a stale entry (``_after``): the search goes on to the next
            seen.add(run_id)
            looked += 1
            cursor, at, checked = run_id, seq, False
            if text not in run_id.lower() and name_hash not in hashes:
                continue
            record = self._listed(run_id)
            if record is not None and record.seq not in (seq, 0):
                # Reached by an entry at another number than its own (a stale one,
                # ``_after``): never the cursor, a page before it would start over from the
                # run's own number, and "search further" would go round forever; and never
                # listed here, where no cursor could follow it, but at its own entry.
                cursor = None
                seen.discard(run_id)
                continue
            if record is not None and record.seq:
                checked = True
            # One that cannot be read, or a record without its number (an older wf's), is
            # checked by its entry's number, ``_seq_of``, if it ends the page.
            if record is None or _after(record, below):
                continue
            if wanted is not None and record.status.value not in wanted:
                continue
            if workflow is not None and record.workflow != workflow:
                continue
            if len(found) < limit and (text in run_id.lower() or text in record.workflow.lower()):
                found.append(record)
                if len(found) == limit and cursor is not None:
                    return found, cursor, looked
        return found, None, looked

    async def workflow_names(self) -> list[str] | None:
        if not self._open(create=False):
            return []
        return await asyncio.to_thread(self.index.workflow_names, self._workflow_of)

    def _workflow_of(self, run_id: str) -> str | None:
        try:
            return str(self._raw(run_id)["workflow"])  # packed or not
        except (RunNotFound, StoreCorrupted, KeyError, OSError):
            return None

    def _rare(self, statuses: set[str]) -> bool:
        """Whether the counts say at most a fifth of the runs have one of ``statuses`` (then a
        filter walks their index rather than a tag's)."""
        if not self.counters.ready():
            return False
        counts = self.counters.read()
        total = sum(max(n, 0) for name, n in counts.items() if name in _STATUSES)
        return sum(max(counts.get(s, 0), 0) for s in statuses) * 5 <= total

    def _seq_of(self, run_id: str) -> int:
        """The creation number of a run, or of a deleted run by its tombstone; 0 if unknown.
        A run whose record cannot be read (damaged, its segment missing or unreadable), or
        whose record has no number (an older wf's), is found by its index entry, which
        carries the number: a page after it still lists."""
        try:
            own = int(self._raw(run_id).get("seq") or 0)
            # A record without its number (an older wf's): its entry carries it.
            return own or (self.index.seq_of(run_id) or 0)
        except RunNotFound:
            pass
        except StoreError:
            seq = self.index.seq_of(run_id)
            if seq is not None:
                return seq
        try:
            validate_run_id(run_id)
        except UsageError:
            return 0
        tombstone = self.tombstones.get(run_id)
        return 0 if tombstone is None else tombstone.seq

    async def read_journal(self, run_id: str, start: int = 0) -> list[Event]:
        """The journal's complete events from ``start`` on (a line being written right now is
        not included); a read from where the last one of the same journal ended parses only
        the lines appended since (``_tails``)."""
        found = self._find(run_id)
        self._remember(run_id, found[0])
        start = max(0, start)
        run_dir, loc = found
        path = os.path.join(run_dir, JOURNAL_FILE)
        if loc is None and self._tails.unread(path) > OFF_LOOP_BYTES:
            # A long journal is parsed in a thread: on the loop, 40,000 events held every
            # other request of a server for a quarter of a second.
            with contextlib.suppress(RunNotFound, StoreError):  # moved meanwhile: see below
                return await in_thread_alone(self._journal_from, path, start)
        return self._read(
            run_id,
            lambda run_dir: self._journal_from(os.path.join(run_dir, JOURNAL_FILE), start),
            lambda packed, run_dir: _journal.parse(
                packed.journal, os.path.join(run_dir, JOURNAL_FILE)
            )[start:],
            found,
        )

    async def first_event(self, run_id: str) -> Event | None:
        """The journal's first event from its first line alone (``Store.first_event``)."""

        def head(path: str) -> bytes:
            with open(path, "rb") as file:
                return file.readline()

        try:
            return self._read(
                run_id,
                lambda run_dir: _journal.first(head(os.path.join(run_dir, JOURNAL_FILE))),
                lambda packed, run_dir: _journal.first(packed.journal),
            )
        except (OSError, RunNotFound, StoreError):
            return None

    def _journal_from(self, path: str, start: int) -> list[Event]:
        return _tails.read_from(
            path, start, self._tails, lambda data: _journal.parse_to_end(data, path)
        )

    async def try_acquire(self, run_id: str) -> Lease | None:
        """Lock the run without waiting; None if another holder (any process) has it.

        The lock is a ``flock`` on the journal, opened for appending: the descriptor the lease
        writes through. A format-1 store's ``lock`` file is locked first, as its wf did.
        A packed run is unpacked first, waiting off the loop for the segments lock if another
        process holds it (a ``wf retry`` while ``wf gc`` packs)."""
        taken = self._leased_at_creation.pop(run_id, None)
        if taken is not None:
            return taken  # its creator's, taken while the creation's flush ran
        for _attempt in range(3):
            try:
                got = self._acquire(run_id)
            except SegmentsBusy:
                await self._unpack(run_id)
                continue
            return None if isinstance(got, _Miss) else got
        raise StoreError(f"cannot lock run {run_id}: it was packed again three times")

    async def _unpack(self, run_id: str) -> None:
        """Unpack the run if it is packed, the segments lock waited for off the loop."""
        async with self.segments.held():
            _compact.unpack_held(self, run_id)

    def _acquire(
        self,
        run_id: str,
        entry: str | None = None,
        want: Callable[[dict[str, Any]], bool] | None = None,
        *,
        whole: bool = False,
        committer: Committer | None = None,
        locked: int | None = None,
    ) -> LocalLease | _Miss:
        """``try_acquire``; with ``entry`` (a queue entry's name), a run whose entry is gone
        once its lock is held is given back untouched (``_Miss.GONE``): another driver moved
        it on since the entry was listed, so whatever is due of it has an entry of its own.
        With ``want``, a run whose stored record it refuses is given back untouched too
        (``_Miss.UNWANTED``). With ``whole`` (a claim: its leases go to drivers, which read
        the journal first thing), the journal is read whole as the lease is taken.

        A packed run is unpacked first (``_existing``); one packed (or deleted) between the
        look and the lock, whose locked journal is then no file's any more, is looked for
        again. ``locked``: the run's journal, already opened and locked by the caller
        (``_fsops.try_lock``), taken over by this call."""
        got = self._acquire_once(run_id, entry, want, whole, committer, locked)
        if got is None:
            got = self._acquire_once(run_id, entry, want, whole, committer)
        if got is None:
            return _Miss.HELD  # moved twice while we looked: try again later
        return got

    def _lock_first(
        self, run_id: str, run_dir: str, entry: str, locked: int | None = None
    ) -> tuple[int, os.stat_result, int | None] | _Miss | None:
        """The run's journal opened and locked before any look at its directory: its
        descriptor, ``fstat`` and ``_no_inbox``'s answer from the look at the run's directory;
        ``_Miss.HELD`` if another driver holds it; ``_Miss.GONE`` if
        the queue entry ``entry`` is gone once it is locked; None if there is no journal to
        open (the caller looks for the run first). Once locked, the run's directory is looked
        at as ``_existing`` does (a link refused, a run cut short at its creation reported
        missing), the lock held. ``locked``: the journal's descriptor, opened and locked by the
        caller already (taken over: closed here on any failure)."""
        journal = run_dir + os.sep + JOURNAL_FILE
        if locked is not None:
            got: tuple[int, os.stat_result] | None = (locked, _fsops.locked_info(locked, journal))
        else:
            try:
                # Held by another driver: an ``open``, the refused ``flock`` and a ``close``.
                got = _fsops.open_locked(journal, os.O_RDWR, allow=_NOT_THERE)
            except (FileNotFoundError, NotADirectoryError):
                return None
        if got is None:
            return _Miss.HELD
        fd, info = got
        if not os.path.exists(os.path.join(self.queue.dir, entry)):
            # The run moved on since the listing (most often another worker just ended it,
            # and its removal is not heard of yet): given back before any other look.
            _fsops.close(fd)
            return _Miss.GONE
        try:
            # A journal with content is a run (``run_exists``), once the caller's
            # ``_still_there`` has found it still at its name: the look is the link check. An
            # empty one is looked at as ``_existing`` does (a creation cut short).
            news = self.hub.inboxes.news  # before the look: a post after it moves the count
            no_inbox = self._no_inbox(_fsops.unlinked_info(run_dir), news)
            if info.st_size == 0 and self._existing(run_id, wait=False) != run_dir:
                raise StoreError(f"run {run_id} moved while it was locked")  # pragma: no cover
        except BaseException:
            with contextlib.suppress(StoreError):
                _fsops.close(fd)
            raise
        return fd, info, no_inbox

    def _no_inbox(self, run_dir: os.stat_result | None, news: int) -> int | None:
        """``news`` (``hub.inboxes.news`` taken before the ``lstat`` ``run_dir`` of a run's
        directory) if that look says the run has no inbox, else None: its link count says it
        has no subdirectory, on a file system whose counts say so, and posts are heard (a
        post since then moves the count). The lease's first read of the inbox then lists
        nothing unless the count moved (``LocalLease.read_inbox``)."""
        if run_dir is None or run_dir.st_nlink != 2 or not self.hub.hearing():
            return None
        counted = self._counts_subdirectories
        if counted is None:
            counted = self._counts_subdirectories = _fsops.counts_subdirectories(self.root)
        return news if counted else None

    def _acquire_once(
        self,
        run_id: str,
        entry: str | None,
        want: Callable[[dict[str, Any]], bool] | None,
        whole: bool,
        committer: Committer | None = None,
        pre_locked: int | None = None,
    ) -> LocalLease | _Miss | None:
        held: list[int] = []
        locked: os.stat_result | None = None
        """The journal's ``fstat`` as ``_lock_first`` took it, the lock held."""
        inbox_news: int | None = None
        """``_no_inbox``'s answer, from ``_lock_first``'s look at the run's directory."""
        if pre_locked is not None and (
            run_id in self._created or entry is None or self._lock_files
        ):  # pragma: no cover - a claim locks first only where ``_lock_first`` is the way
            _fsops.close(pre_locked)
            pre_locked = None
        if run_id in self._created:
            # Created by this process: opening its journal is the existence check (a run
            # deleted since is reported as missing below).
            run_dir = self.run_dir(run_id)
            _fsops.refuse_link(run_dir)
        elif entry is not None and not self._lock_files:
            # A claim's attempt, most often on a run another worker drives (every worker tries
            # the runs the others took since its last claim): the lock first, and the look at
            # the run's directory (``_existing``) only once it is held. A run whose journal is
            # not there (packed, gone) is looked for first, as below.
            run_dir = self.run_dir(run_id)
            first = self._lock_first(run_id, run_dir, entry, pre_locked)
            if isinstance(first, _Miss):
                return first
            if first is None:
                run_dir = self._existing(run_id, wait=False)
            else:
                held.append(first[0])
                locked, inbox_news = first[1], first[2]
        else:
            run_dir = self._existing(run_id, wait=False)
        journal = run_dir + os.sep + JOURNAL_FILE
        targets = [(journal, os.O_RDWR)]  # appends overwrite the slack: no O_APPEND
        if self._lock_files:
            targets.insert(0, (run_dir + os.sep + LOCK_FILE, os.O_RDWR | os.O_CREAT))
        if held:
            targets = []  # locked already

        def give_back(miss: _Miss) -> _Miss:
            for fd in held:
                _fsops.close(fd)
            held.clear()
            return miss

        try:
            for path, flags in targets:
                try:
                    fd = _fsops.try_lock(path, flags, allow=(errno.ENOENT,))
                except FileNotFoundError:
                    # RunNotFound if the run is gone; unpacked again if another process packed
                    # it since the look, and then its files are back: look again.
                    self._existing(run_id, wait=False)
                    if os.path.exists(journal):
                        give_back(_Miss.GONE)
                        return None
                    raise StoreCorrupted(f"cannot open {path}: it is missing") from None
                if fd is None:
                    return give_back(_Miss.HELD)
                # One ``fstat``, with the lock held: a regular file, and (the journal's) the
                # one ``_still_there`` compares with the path's.
                locked = _fsops.locked_info(fd, path)
                held.append(fd)
            info = _still_there(held[-1], journal, locked)
            if info is None:
                give_back(_Miss.GONE)
                return None  # packed or deleted since we opened it: look again
            if (
                entry is not None
                and locked is None  # else ``_lock_first`` looked, the lock held
                and not os.path.exists(os.path.join(self.queue.dir, entry))
            ):
                return give_back(_Miss.GONE)
            lock_fd = held[0] if self._lock_files else None
            settle = self.log is not None
            raw = None
            # What the read of the record found: the record if it was rebuilt from the journal
            # (the lease does not parse ``raw`` again), and whether ``run.json`` is there.
            rebuilt: RunRecord | None = None
            has_file: bool | None = None
            if want is not None:
                # Read once, for both.
                raw, rebuilt, has_file = _records.read_stored(run_dir, run_id)
                if not want(raw):
                    return give_back(_Miss.UNWANTED)
            created = self._created.pop(run_id, None)
            if created is not None:
                size, known = created
                if (
                    known is not None
                    and info.st_size == _journal.padded(size)
                    and _fsops.pread(held[-1], 1, size, journal) in (b"", b"\0")
                    and not os.path.exists(os.path.join(run_dir, RUN_FILE))
                ):
                    # Nobody has driven the run since this process created it (only a lease
                    # holder appends, or writes ``run.json``; an append would have filled the
                    # byte after the created events, or grown the file): its journal is the
                    # bytes written then, and its record the one they rebuild. Nothing to read.
                    return LocalLease(
                        self,
                        run_id,
                        held[-1],
                        lock_fd,
                        None,
                        size,
                        settle=settle,
                        known=known,
                        device=info.st_dev,
                        run_dir=run_dir,
                        committer=committer,
                    )
                created_size: int | None = size
            else:
                created_size = None
            if raw is None and not whole:
                raw, rebuilt, has_file = _records.read_stored(run_dir, run_id)
            if raw is not None:
                return LocalLease(
                    self,
                    run_id,
                    held[-1],
                    lock_fd,
                    raw,
                    created_size,
                    settle=settle,
                    rebuilt=rebuilt,
                    has_file=has_file,
                    listed=entry,
                    device=info.st_dev,
                    run_dir=run_dir,
                    committer=committer,
                    inbox_news=inbox_news,
                )
            # Read whole once, under the lock: the record is rebuilt from the journal's ends when
            # there is no ``run.json``, and the driver's ``read_run`` gets its events.
            # The ``fstat`` taken with the lock held gives the length (only the lock holder
            # appends), and the tail's read, which covers a short journal whole, its content.
            content, size, length = _journal.read_repaired(held[-1], journal, info.st_size)
            try:
                events: list[Event] | None = _journal.parse(content, journal)
            except StoreCorrupted:
                events = None  # damaged before its end: said when the driver reads it
            # The record the first event carries, made once: the rebuilt record starts from a
            # copy of it, and the lease's saves compare against it (``_records.needs_file``).
            data, rebuilt, has_file, as_created = _records.read_for_lease(run_dir, run_id, events)
            return LocalLease(
                self,
                run_id,
                held[-1],
                lock_fd,
                data,
                created_size,
                settle=settle,
                device=info.st_dev,
                run_dir=run_dir,
                journal=(events, size, length),
                rebuilt=rebuilt,
                has_file=has_file,
                listed=entry,
                committer=committer,
                created=as_created,
                inbox_news=inbox_news,
            )
        except BaseException:
            for fd in held:
                with contextlib.suppress(StoreError):
                    _fsops.close(fd)
            raise

    async def claim(
        self,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
        exclude: Collection[str] = (),
        held: set[str] | None = None,
        waiting: set[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[Lease]:
        """``Store.claim`` from one listing of ``queue/``, at a cost that does not grow with
        the number of workers sharing the store.

        Every worker lists the same head of the queue, where the runs the others drive sit
        (a running run keeps its due-now entry: it is how an orphan is found). So: no run is
        looked at before its lock is tried (the lock attempt finds out whether it exists); a
        run found held by another driver is not tried again by this store for
        ``HELD_RETRY`` seconds while its entry is the same (it is reported in ``held``
        meanwhile: its driver's end changes or removes the entry, a crash releases the lock,
        a lease of this process forgets it as it is released, and a drive another process
        gives back without changing the entry is seen within ``HELD_RETRY``, or, with more
        than ``HELD_RETRIES`` runs held, once the claims have come round to it); and a run whose
        listed entry is gone once its lock is held is given back untouched rather than
        leased (another driver moved it on since the listing: usually it just ended).

        A run in a group lane (its entries' tag names the lane) is tried only if it is among
        the lane's first ``group_concurrency`` unfinished runs: one listing of the lane per
        claim, made when the claim order first reaches the lane, in which runs listed due
        count as unfinished without a look at their records (``Lanes.heads``). The others
        wait, and are never looked at one by one (``Queue.ordered``): leasing them would only
        have their admission hold them back. They are reported in ``waiting`` by a claim that
        leases nothing (the first ``WAITING_REPORTED`` of each lane: a cost in proportion to
        the lanes' lengths, not paid by each claim of a drain). When a head ends, its entries
        go, and the next claim finds the next run of the lane at the head.

        A run seen only through untagged entries (most runs in no group and no named queue)
        is placed by its record, read once its lock is held, for the claim's test and the
        lease both; one the claim does not want (another queue's, or behind in its lane) is
        given back before anything is brought in line with that record.
        """
        leases: list[Lease] = []
        if limit <= 0 or not self._open(create=False):
            return leases
        # The leases' committer, looked up once for the claim (a lookup of the running loop
        # asks the process id, a system call).
        committer = committer_for(asyncio.get_running_loop())
        clock = time.monotonic()
        memory = self.hub.held
        # In the order they were last tried (a run tried again is put back at the end).
        stale = [r for r, (_, at) in list(memory.items()) if clock - at >= HELD_RETRY]
        for run_id in stale[:HELD_RETRIES]:
            memory.pop(run_id, None)
        # Runs another process drives sit at the head of the queue (a running run keeps its
        # due-now entry), and each worker would try each one's lock once. Once another
        # driver has been met, a run that ``by-status/`` lists running is passed over at
        # first (one ``listdir`` per thousand-run bucket a claim reaches, against an
        # ``open``, a refused ``flock`` and a ``close`` per run), and tried once
        # ``HELD_RETRY`` has passed since, or at once if the claim found too few other runs
        # (an orphan's listing says running too: its lock decides).
        listed = self.hub.listed_running
        if len(listed) > LISTED_RUNNING_MAX:
            # Forget those passed over long ago (mostly runs that ended elsewhere, never looked
            # at again): clearing them all made every run first passed over again by each
            # claim while more than the cap were listed running, an orphan among them for good.
            for run_id in [r for r, at in listed.items() if clock - at >= LISTED_RUNNING_FORGET]:
                del listed[run_id]
        look = bool(memory)
        running: dict[str, frozenset[str]] = {}
        passed: list[tuple[str, str, bool]] = []
        walking = True
        tried = 0
        """Runs of ``passed`` the claim came back to."""
        lane_heads: dict[str, tuple[set[str], bool]] = {}

        def heads(lane: tuple[str, int]) -> tuple[set[str], bool]:
            found = lane_heads.get(lane[0])
            if found is None:
                # A lane that cannot be read (a stray file where its directory belongs) lets
                # none of its runs through; the other lanes and runs go on.
                found = (set(), False)
                where = os.path.join(self.lanes.dir, lane[0])
                with self.faults.contain("lane", lane[0], where):
                    found = self._lane_heads(lane, due_now)
                lane_heads[lane[0]] = found
            return found

        wanted = queue_hashes(queues)
        pins = pin_hashes(deployments)
        full: dict[str, set[str]] = {}
        order = self.queue.ordered(
            now, queues, heads, waiting, resolve=False, deployments=deployments, full=full
        )
        due_now = self.queue.due_set(now)  # of the listing ``ordered`` made
        lock_first = not self._lock_files  # else ``_acquire_once`` takes the lock file first
        runs_dir, faults = self.runs + os.sep, self.faults
        for due, run_id, tags_known in itertools.chain(order, _COME_BACK, passed):
            if len(leases) >= limit:
                break
            if not walking:
                tried += 1
            elif not run_id:
                walking = False  # the order's end: the runs passed over follow
                continue
            if run_id in exclude:
                continue
            known = memory.get(run_id)
            if known is not None and known[0] == due:
                if held is not None:
                    held.add(run_id)
                continue
            locked: int | None = None
            failed: Exception | None = None
            if lock_first and run_id not in self._created:
                if look and walking:
                    # The creation number its ``+s`` tag (the last) gives, unparsed: the
                    # thousand-run bucket is its digits but the last three.
                    at = due.rfind(SEQ_TAG, 14)
                    digits = due[at + 2 :] if at >= 0 else ""
                    ids = running.get(digits[:-3])
                    if ids is None and digits.isascii() and digits.isdigit():
                        ids = running[digits[:-3]] = self.index.running_ids(int(digits))
                    if ids and run_id in ids:
                        if clock - listed.setdefault(run_id, clock) < HELD_RETRY:
                            passed.append((due, run_id, tags_known))
                            continue
                    elif listed.pop(run_id, None) is not None and not os.path.exists(
                        os.path.join(self.queue.dir, queue_name(due, run_id))
                    ):
                        # Listed running before, and now not: it ended here, most likely, and
                        # its entry went (the removal is not heard of yet). One look, no lock.
                        continue
                # The lock is tried before anything else is made for the attempt: with four
                # workers about three attempts in four are refused (each worker tries each
                # run another took since its last claim), and then that is all it costs. A
                # journal that is not there (packed, gone) is looked for on the way below; any
                # other failure is raised there, where a run's own failures are dealt with.
                refused = False
                try:
                    journal = runs_dir + validate_run_id(run_id) + os.sep + JOURNAL_FILE  # run_dir
                    locked = _fsops.try_lock(journal, os.O_RDWR, allow=_NOT_THERE)
                    refused = locked is None
                except (FileNotFoundError, NotADirectoryError):
                    pass  # no journal there: looked for below
                except (StoreError, UsageError) as error:
                    failed = error
                except BaseException:  # interrupted: the runs leased so far are given back
                    for taken in leases:
                        await taken.release()
                    raise
                if refused:
                    look = True
                    if faults.tries("run", run_id):
                        faults.forget("run", run_id)  # it refused before, it is read now
                    memory[run_id] = (due, clock)
                    if held is not None:
                        held.add(run_id)
                    continue
            want = None
            if not tags_known:
                want = functools.partial(self._wanted, run_id, wanted, pins, heads, waiting)
            got: Lease | _Miss | None = None
            where = functools.partial(self.run_location, run_id)  # joined only on a fault
            try:
                # A damaged run is skipped (noted once in ``faults``; the worker leaves it
                # alone from then on): the claim goes on with the others.
                with self.faults.contain("run", run_id, where):
                    if failed is not None:
                        raise failed
                    got = self._acquire(
                        run_id,
                        queue_name(due, run_id),
                        want,
                        whole=True,
                        committer=committer,
                        locked=locked,
                    )
            except SegmentsBusy:
                continue  # packed, and another process packs now: a later claim unpacks it
            except RunNotFound:
                run_dir = self.run_dir(run_id)
                if run_present(run_dir) and _records.cut_short(run_dir):
                    self._discard(run_dir)  # what a power cut left of a creation: no run
                self.queue.run_exists(due, run_id)  # removes a long-crashed creation's entry
                continue
            except StoreError as error:
                if out_of_files(error):
                    # Not the run's fault: this process has as many files open as it may. Half
                    # the runs leased are given back, their files closed for the drives of the
                    # others (which open more); the next claims take more as drives end.
                    keep = (len(leases) + 1) // 2
                    for taken in leases[keep:]:
                        await taken.release()
                    del leases[keep:]
                    self._out_of_files(error, keep)
                    break
                if not item_own(error, self.run_dir(run_id)):
                    for taken in leases:
                        await taken.release()
                    raise
                # One of the run's own files refused (EACCES, EIO): the run's fault, maybe for
                # now only. Skipped (said once), tried again later (see ``Worker``).
                self.faults.note("run", run_id, where(), error, again=True)
                continue
            except BaseException:
                for taken in leases:
                    await taken.release()
                raise
            if got is None:
                continue
            if self.faults.tries("run", run_id):
                self.faults.forget("run", run_id)  # it refused before, it is read now
            if got is _Miss.HELD:
                look = True
                memory[run_id] = (due, clock)
                if held is not None:
                    held.add(run_id)
            elif not isinstance(got, _Miss):
                memory.pop(run_id, None)
                listed.pop(run_id, None)
                # Past ``_in_order`` (or ``_wanted``), a run in a lane is among its heads.
                got.heads_lane = True
                leases.append(got)
        if held is not None:
            # Passed over and not come back to: driven elsewhere, as far as the claim knows.
            held.update(run_id for _, run_id, _ in passed[tried:])
        if not leases and waiting is not None:
            self.queue.waiting_behind(full, now, waiting)
        return leases

    def _out_of_files(self, error: StoreError, held: int) -> None:
        """Said once per store: a claim stopped early, this process being out of open files."""
        if self._said_out_of_files:
            return
        self._said_out_of_files = True
        log.warning(
            "%s; claiming fewer runs (%d this time): `ulimit -n` %s is too low for this many "
            "runs at once; wf needs about %d open files per run driven",
            error,
            held,
            open_files_limit() or "?",
            FILES_PER_RUN,
        )

    def _lane_heads(self, lane: tuple[str, int], due_now: Container[str]) -> tuple[set[str], bool]:
        """``Lanes.heads``, without listing the lane again while it is full of the same heads.

        A full lane's first runs change only when one of them ends: runs join a lane at its
        back (a retry too), so none can come ahead of them. While every head of the last
        listing is still due in this listing (unfinished: a running run keeps its due-now
        entry; one that ended has lost its entries, one that suspended has moved them), the
        lane's heads are the same. A run of the group still being created when the lane was
        listed (its entry there, its record not yet) may sort ahead of them: it waits for
        them to end rather than run beside them."""
        cached = self._full_lanes.get(lane[0])
        if cached is not None and cached[1] == lane[1] and all(r in due_now for r in cached[0]):
            return set(cached[0]), False
        first, whole = self.lanes.heads(lane[0], lane[1], due_now)
        if whole:
            self._full_lanes.pop(lane[0], None)
        else:
            if len(self._full_lanes) > 10_000:
                self._full_lanes.clear()
            self._full_lanes[lane[0]] = (frozenset(first), lane[1])
        return first, whole

    def _wanted(
        self,
        run_id: str,
        wanted: set[str] | None,
        pins: set[str | None] | None,
        heads: Callable[[tuple[str, int]], tuple[set[str], bool]],
        waiting: set[str] | None,
        raw: dict[str, Any],
    ) -> bool:
        """For a run the listing could not place (only untagged entries: most runs in no
        group and no named queue), once its lock is held and its record read: whether the
        claim wants it (its named queue and deployment are served, and it heads its lane if
        it is in one)."""
        queue, lane = self.queue.remember(run_id, tags_of_record(raw))
        if wanted is not None and queue not in wanted:
            return False
        if pins is not None and self.queue.pin_of_record(run_id, raw) not in pins:
            return False
        if lane is not None:
            first, whole = heads(lane)
            if run_id not in first and not whole:
                if waiting is not None:
                    waiting.add(run_id)
                return False
        return True

    # -- inbox and queue -------------------------------------------------------------------

    async def post(self, run_id: str, kind: str, data: dict[str, Any]) -> str:
        """Write the message durably, then make the run due (never takes the run's lease).

        Three steps, each made durable before the next is written, so a power cut never
        leaves a due entry without its message, nor a message's name without its bytes:

        1. the message is written to a temporary file in the run's inbox (the first post makes
           ``inbox/``), and flushed;
        2. it is renamed to its own name there, and the inbox flushed;
        3. the run's due-now entry is replaced, and ``queue/`` flushed.

        The flushes are made in a thread (``_offloop``), shared with the posts in flight: a
        burst of wakes, cancels or hook deliveries to a server costs a few flushes, and its
        event loop goes on serving meanwhile. Without syncfs each step fsyncs as it goes.

        Steps 1 and 2 hold ``segments/lock`` shared: a run is never packed while a message is
        being put into its directory (the packer would move the directory away from under
        it), and a packed run is unpacked first. In between, the temporary file keeps the run
        from being packed (its inbox is not empty). The lock is tried on the loop; held by
        another process (a pack, a ``wf gc`` stopped with Ctrl-Z), it is waited for in a
        thread (``Segments.held``), and the loop goes on serving meanwhile."""
        message_id = "msg_" + new_run_id()[5:]
        try:
            body = orjson.dumps({"id": message_id, "kind": kind, "data": data})
        except TypeError as error:
            raise StoreError(f"cannot post to run {run_id}: data is not JSON ({error})") from None
        with _posting(run_id):
            return await self._post(run_id, message_id, body)

    def posting(self, run_id: str) -> bool:
        """Whether a post to the run is under way in this process (any ``LocalStore``): its
        message may be in the inbox while the run is not due yet, for a flush."""
        return _in_flight().get(run_id, 0) > 0

    async def _post(self, run_id: str, message_id: str, body: bytes) -> str:
        name = f"{message_id}.json"
        flusher = flusher_for(asyncio.get_running_loop())
        if not self._open(create=False):  # which opens the device's ``_fsops.FileSystem``
            raise RunNotFound(run_id)
        since = _fsops.mark(self.root, self._device)  # before anything its flushes must cover
        temp, owed = await self._stage_message(run_id, name, body)
        if owed:  # the message's bytes (and the inbox's own name), before its name can be
            await _flushed(flusher.request(self.root, self._device, since, owed), temp)
        try:
            async with self.segments.held(shared=True):
                run_dir, owed = self._place_message(run_id, temp, name)
        except BaseException:
            _fsops.unlink(temp, allow=(errno.ENOENT,))
            raise
        # The run's own names may not be durable yet if its creation is in the log: they must
        # be before a message in it is acknowledged (None: the whole file system), and they
        # were written before this post's mark, after the log's.
        names: list[str] | None = owed
        if self.log is not None:
            names, since = None, min(since, self.log.since)
        if names is None or names:
            placed = os.path.join(run_dir, INBOX_DIR, name)
            flush = flusher.request(self.root, self._device, since, names)
            try:
                await asyncio.shield(flush)
            except Exception:
                # Withdrawn: a message whose name may not last must not wake the run (nothing
                # was acknowledged; a power cut may still keep it, as it may any message
                # posted unacknowledged, and the run's next drive reads it).
                _withdraw(flush, placed)
                raise
            except BaseException:
                # Cancelled (a worker stopping, its loop closing) with the message already in
                # the inbox, where a driver or the wake-up check may have seen it: finished
                # here, on the loop, so that no message is left in the inbox of a run that is
                # not due (a post with no await inside, as before the shared flushes).
                self._finish_post_now(run_id, run_dir, names, flush, placed, since)
                raise
        owed = self._make_due(run_id, run_dir)
        if owed:
            await asyncio.shield(flusher.request(self.root, self._device, since, owed))
        return message_id

    def _make_due(self, run_id: str, run_dir: str) -> list[str]:
        """Step 3 of ``post`` (the message is durable in the inbox): the run's due-now entry,
        and the watchers here told; returns the fsyncs deferred to the caller's flush."""
        with _fsops.deferred_fsyncs() as owed:
            raw = _records.read_raw(run_dir, run_id)
            if not RunStatus(raw.get("status") or "pending").is_terminal:
                # After the message (see ``LocalLease._reconcile``); the run's own due-now
                # entry, so that its tags keep its place (priority, creation) and lane.
                self.queue.poke(run_id, raw_tag(raw))
        # Told before the entry's flush: the message is durable, and a waiter here may go on
        # even if this post is cancelled while the flush is made.
        self.hub.touch("")
        self.hub.touch(run_id)
        self.hub.inboxes.heard(run_id)
        return owed

    def _finish_post_now(
        self,
        run_id: str,
        run_dir: str,
        names: list[str] | None,
        flush: asyncio.Future[None],
        placed: str,
        since: int,
    ) -> None:
        """Steps 2 (its flush) and 3 of a post cancelled while it waited for the inbox's
        flush, made on the loop thread: the message is durable before the run is made due,
        as ever. A flush that fails withdraws the message instead; a failed flush of the
        queue is not said (the cancellation goes on; the entry is written)."""
        here = {self._device: (self.root, None if names is None else set(names))}
        marks = {self._device: since}
        if sync_owed(here, marks) is not None:
            _withdraw(flush, placed)
            return
        with contextlib.suppress(RunNotFound, StoreError):
            owed = self._make_due(run_id, run_dir)
            if owed:
                sync_owed({self._device: (self.root, set(owed))}, marks)

    async def _stage_message(self, run_id: str, name: str, body: bytes) -> tuple[str, list[str]]:
        """Step 1 of ``post``: the message in a temporary file of the run's inbox; returns its
        path and the fsyncs deferred to the caller's flush (none without syncfs: each was
        made)."""
        for _attempt in range(3):
            if self._find(run_id)[1] is not None:
                await self._unpack(run_id)  # not under the shared lock: unpacking takes it
                # exclusively
            async with self.segments.held(shared=True):
                with _fsops.deferred_fsyncs() as owed:
                    run_dir, loc = self._find(run_id)
                    if loc is not None:
                        continue  # packed again meanwhile
                    inbox = os.path.join(run_dir, INBOX_DIR)
                    _fsops.refuse_link(inbox)
                    if _fsops.mkdir(inbox, allow=(errno.EEXIST,)):
                        _fsops.fsync_dir(run_dir)  # the inbox's own name, before a message
                    return _atomic.write_temp(inbox, name, body), owed
        raise StoreError(f"cannot post to run {run_id}: it was packed again three times")

    def _place_message(self, run_id: str, temp: str, name: str) -> tuple[str, list[str]]:
        """Step 2 of ``post``: the durable temporary file ``temp`` renamed to ``name`` in the
        run's inbox (``segments/lock`` held shared by the caller); returns the run's
        directory and the fsyncs deferred to the caller."""
        with _fsops.deferred_fsyncs() as owed:
            run_dir, loc = self._find(run_id)  # RunNotFound if deleted meanwhile
            if loc is not None:  # never: the temporary file keeps the run from being packed
                raise StoreError(f"cannot post to run {run_id}: it was packed meanwhile")
            inbox = os.path.join(run_dir, INBOX_DIR)
            _fsops.rename(temp, os.path.join(inbox, name))
            _fsops.fsync_dir(inbox)
            return run_dir, owed

    async def read_inbox(self, run_id: str) -> list[InboxMessage]:
        """Unacknowledged messages, oldest first (a packed run has none)."""
        run_dir, loc = self._find(run_id)
        return [] if loc is not None else self.read_inbox_of(run_dir)

    def read_inbox_of(self, run_dir: str) -> list[InboxMessage]:
        """``read_inbox`` of the run in ``run_dir``, known to exist (its lease is held)."""
        inbox = run_dir + os.sep + INBOX_DIR
        out = []
        for name in sorted(_fsops.listdir(inbox)):
            if name.startswith(".") or not name.endswith(".json"):
                continue
            path = os.path.join(inbox, name)
            try:
                raw = _fsops.read_bytes(path, allow=(errno.ENOENT,))
            except FileNotFoundError:
                continue  # acknowledged meanwhile
            try:
                data = orjson.loads(raw)
                message_id, kind, payload = data["id"], data["kind"], data["data"]
            except (orjson.JSONDecodeError, KeyError, TypeError) as error:
                raise StoreCorrupted(f"{path}: not an inbox message ({error!r})") from None
            out.append(checked_message(str(message_id), kind, payload, path))
        return out

    async def due_runs(
        self,
        now: float,
        limit: int = 100,
        queues: Sequence[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[str]:
        """Due runs from the queue directory alone (plus one existence check per result, and
        a look at the record of an unpinned-looking run seen only through untagged entries)."""
        if not self._open(create=False):
            return []
        return self.queue.due(now, limit, queues, deployments)

    # -- lanes, slots, rates ---------------------------------------------------------------

    async def lane_ahead(self, lane: str, run_id: str, limit: int) -> list[str]:
        """From ``lanes/``: a listing of the lane, and the records ahead (``_lanes``)."""
        if not self._open(create=False):
            return []
        return self.lanes.ahead(lane, run_id, limit)

    async def try_slot(self, name: str, capacity: int) -> Slot | None:
        """An flock on one of ``slots/<hash>.<i>``."""
        self._open(create=True)
        return self.slots.take(name, capacity)

    async def slots_taken(self, name: str, capacity: int) -> int:
        """Places whose file is locked now."""
        if not self._open(create=False):
            return 0
        return self.slots.taken(name, capacity)

    async def try_rate(self, name: str, n: int, window: float, now: float) -> float | None:
        """Starts within the window, in ``rates/<hash>.json`` under a lock."""
        self._open(create=True)
        return self.rates.take(name, n, window, now)

    async def rate_retry_at(self, name: str, n: int, window: float, now: float) -> float | None:
        """Read ``rates/<hash>.json`` (no lock: a torn read is impossible, it is replaced)."""
        if not self._open(create=False):
            return None
        return self.rates.retry_at(name, n, window, now)

    async def next_due_at(
        self, after: float | None = None, queues: Sequence[str] | None = None
    ) -> float | None:
        """The earliest due time in the queue (0.0 when something is due at once)."""
        if not self._open(create=False):
            return None
        return self.queue.next_due_at(after, queues)

    async def wait_for_activity(self, timeout: float) -> None:
        """Until the queue changes (a new run, a post, a changed due time), or timeout.

        With file-system events, changes are counted as they are heard of (``Hub.activity``),
        this process's own and the others': the wait compares the count with the one taken
        before the last listing (``Queue.seen_activity``) instead of listing the queue again,
        and lists it only every poll interval of waiting, should an event have been lost.
        Without events (or before the watcher was up at that listing), it compares listings.
        """
        self._open(create=True)
        hub, queue = self.hub, self.queue
        if self._events and not self._schedules_made:
            self.schedules.make_dir()  # watched, for schedules other processes set (``Hub``)
            self._schedules_made = True
        since = queue.seen_activity
        if self._events and hub.watch(None) and since is not None and since >= hub.heard_from:

            def count() -> int:
                return hub.activity

            def listing_changed() -> bool:
                listed = queue.fingerprint()
                if listed == queue.seen:
                    return False
                queue.seen = listed  # reported by this wait: the next compares with it
                queue.resync()  # heard of it from no event: the view may have missed it
                return True

            await hub.wait("", timeout, count, since, self._interval, listing_changed)
            queue.seen_activity = hub.activity  # what this wait has reported
            return
        base = queue.seen if queue.seen is not None else queue.fingerprint()
        await hub.wait("", timeout, queue.fingerprint, base, self._interval)
        queue.seen_activity = hub.activity
        queue.seen = queue.fingerprint()

    async def wait_for_run(self, run_id: str, timeout: float) -> None:
        """Until the run's record, journal, streams or inbox change, or timeout (a packed
        run changes when it is unpacked: its directory appears)."""
        run_dir, loc = self._find(run_id)
        if self._events and loc is None:
            self.hub.watch(run_dir)
            # The watcher is not recursive: a message posted by another process (a hook
            # payload, a cancel) must wake a waiter without its poll interval. The first post
            # creates the inbox: that shows in the run directory (and in the fingerprint), and
            # the next wait watches the inbox too.
            inbox = os.path.join(run_dir, INBOX_DIR)
            if os.path.isdir(inbox):
                self.hub.watch(inbox)

        def fingerprint() -> _Fingerprint:
            return _fingerprint(run_dir)

        base = self._seen.get(run_id)
        if base is None:
            base = fingerprint()
        await self.hub.wait(run_id, timeout, fingerprint, base, self._interval)
        self._seen[run_id] = fingerprint()

    def watch_inbox(self, run_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Called back on this process's posts to the run at once, and on other processes'
        as the watcher of ``queue/`` hears their due-now entries (``Hub.dispatch``); with
        no file-system events, only on this process's."""
        loop = asyncio.get_running_loop()
        unwatch = self.hub.inboxes.add(run_id, callback, loop)
        if not self._events or self.hub.hearing():
            return unwatch
        # Not at once: the watcher's thread handles an event for every file the store writes,
        # 15% more CPU for short runs driven outside a worker (whose watcher runs anyway), and
        # most runs end before anyone could cancel them. A run still watched after
        # HEAR_INBOXES_AFTER starts it, and looks once for what came meanwhile.
        key = object()
        unheard = self._unheard
        unheard[key] = loop.time()
        if self._hear_loop is not loop:
            if self._hear_timer is not None:
                self._hear_timer.cancel()
            self._hear_loop = loop
            self._hear_timer = loop.call_later(HEAR_INBOXES_AFTER, self._hear_inboxes)

        def stop() -> None:
            unheard.pop(key, None)
            unwatch()

        return stop

    def _hear_inboxes(self) -> None:
        loop, self._hear_loop, self._hear_timer = self._hear_loop, None, None
        if self._closed or self.hub.hearing() or not self._unheard or loop is None:
            return
        due = next(iter(self._unheard.values())) + HEAR_INBOXES_AFTER
        if due > loop.time():  # the oldest watch is younger: look again when it is old enough
            self._hear_loop = loop
            self._hear_timer = loop.call_at(due, self._hear_inboxes)
            return
        self._unheard.clear()
        if self.hub.watch(None):
            self.hub.inboxes.heard_all()  # a post made before the watcher ran is looked for

    def _remember(self, run_id: str, run_dir: str) -> None:
        # Taken *before* the read it accompanies, so a change racing the read still shows.
        self._remember_look(run_id, run_dir, _look(run_dir))

    def _remember_look(
        self,
        run_id: str,
        run_dir: str,
        look: list[tuple[str, int, int, int]],
        written: int | None = None,
    ) -> None:
        """Keep the fingerprint of ``look`` (``_fingerprint_of``) for the run's next wait."""
        if len(self._seen) > 4096:
            self._seen.clear()
        self._seen[run_id] = _fingerprint_of(look, run_dir, written)

    # -- hooks -----------------------------------------------------------------------------

    async def register_hook(self, hook: HookRecord) -> str | None:
        """Claim the token atomically; None if claimed (or ours already), else the owner."""
        validate_run_id(hook.run_id)
        self._open(create=True)
        return self.hooks.register(hook)

    async def get_hook(self, token: str) -> HookRecord | None:
        """The live hook with that token."""
        if not self._open(create=False):
            return None
        return self.hooks.get(token)

    async def release_hook(self, token: str, run_id: str) -> None:
        """Free the token if ``run_id`` owns it."""
        validate_run_id(run_id)
        if self._open(create=False):
            self.hooks.release(token, run_id)

    async def save_delivery(self, delivery: WebhookDelivery) -> None:
        """Published once under ``hooks/delivered/`` (the first kept for an id stays)."""
        self._open(create=True)
        await asyncio.to_thread(self.hooks.save_delivery, delivery)

    async def post_once(
        self, run_id: str, kind: str, data: dict[str, Any], delivery: WebhookDelivery
    ) -> WebhookDelivery | None:
        """Under an exclusive ``flock`` on ``hooks/delivered/.lock`` (processes and callers of
        one process alike): read the delivery's file, else post and publish it. A crash
        between the post and the publish leaves the message unkept: a retry posts it again
        (twice rather than never)."""
        self._open(create=True)
        async with self._deliveries_locked():
            kept = await asyncio.to_thread(self.hooks.get_delivery, delivery.id)
            if kept is not None:
                return kept
            await self.post(run_id, kind, data)
            await asyncio.to_thread(self.hooks.save_delivery, delivery)
            return None

    @contextlib.asynccontextmanager
    async def _deliveries_locked(self) -> AsyncIterator[None]:
        """Holds the ``flock`` on ``hooks/delivered/.lock``, and this event loop's gate on it
        first: a holder needs the default thread pool (reads, the post, the publish), so at
        most one thread of the loop may wait on the ``flock`` (64 keyed resumes at once, each
        in a thread waiting on it, took every thread of the pool and waited for ever)."""
        gate = _deliveries_gate(self.hooks.dir)
        await gate.acquire()
        try:
            fd = self.hooks.lock_deliveries(wait=False)
        except BaseException:
            gate.release()
            raise
        if fd is None:  # another process holds it: wait in one thread
            locking = _waitlock.waited_for(lambda wait: self.hooks.lock_deliveries(wait=wait))
            try:
                fd = await asyncio.shield(locking)
            except asyncio.CancelledError:
                # The thread still takes the lock: the gate stays closed until it is let go,
                # so a cancelled caller never leaves a second thread waiting behind it.
                locking.add_done_callback(functools.partial(_waitlock.let_go, gate))
                raise
            except BaseException:
                gate.release()
                raise
        assert fd is not None  # a waiting lock_deliveries returns one
        try:
            yield
        finally:
            _fsops.close(fd)
            gate.release()

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, WebhookDelivery]:
        """The files under ``hooks/delivered/`` for those ids (in one worker thread)."""
        if not delivery_ids or not self._open(create=False):
            return {}

        def read() -> dict[str, WebhookDelivery]:
            found = ((key, self.hooks.get_delivery(key)) for key in delivery_ids)
            return {key: delivery for key, delivery in found if delivery is not None}

        return await asyncio.to_thread(read)

    async def prune_deliveries(self, before: float) -> int:
        """Unlink the old files under ``hooks/delivered/`` (in a worker thread)."""
        if not self._open(create=False):
            return 0
        return await asyncio.to_thread(self.hooks.prune_deliveries, before)

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        """Live hooks of one run (its markers) or of all runs (the hooks directory)."""
        if not self._open(create=False):
            return []
        if run_id is None:
            return self.hooks.all()
        validate_run_id(run_id)
        return self.hooks.of_run(run_id)

    # -- streams ---------------------------------------------------------------------------

    async def read_chunks(
        self, run_id: str, stream: str, start: int = 0, *, max_bytes: int | None = None
    ) -> tuple[list[bytes], bool]:
        """Chunks from ``start`` on (a batch with ``max_bytes``), and whether the stream is
        closed. Their index is read here; their bytes too when few, else in a thread: three
        readers of a stream of 20 MB chunks over ``wf serve`` held the loop for seconds. The
        index is read again after the bytes, and the read made again if a writer's repair
        changed it meanwhile (a read in a thread gave a torn chunk's bounds on new bytes)."""
        if start < 0:
            raise UsageError(f"read_chunks start must be >= 0, not {start}")
        run_dir, _loc = self._find(run_id)  # a packed run has no stream: its files are absent
        self._remember(run_id, run_dir)
        for _ in range(_streams.RACES):  # again while a writer's repair changes the index
            span = _streams.locate(run_dir, stream, start, max_bytes)
            if span.size <= _READ_ON_LOOP:
                chunks, whole = _streams.load(span)
            else:
                chunks, whole = await asyncio.to_thread(_streams.load, span)
            if whole:
                return chunks, span.closed
        return chunks, False  # the chunks the index held both before and after their read

    async def list_streams(self, run_id: str) -> dict[str, tuple[int, bool]]:
        """Stream name -> (chunk count, closed); a damaged stream is left out, noted in
        ``faults``."""
        return _streams.list_streams(self._find(run_id)[0], self.faults, run_id)  # packed: none

    async def stream_info(self, run_id: str, stream: str) -> tuple[int, bool]:
        """One stream's (chunk count, closed), read from its own files (not the name file a
        listing goes by); ``StoreCorrupted`` when they are damaged."""
        return _streams.info(self._find(run_id)[0], stream)  # packed: none

    # -- step logs -------------------------------------------------------------------------

    async def read_logs(self, run_id: str, start: int = 0) -> list[LogEntry]:
        """Step log entries from ``start`` on."""
        found = self._find(run_id)
        self._remember(run_id, found[0])
        return self._read(
            run_id,
            lambda run_dir: _logs.read_from(run_dir, start, self._tails),
            lambda packed, _run_dir: _logs.parse(packed.logs, start),
            found,
        )

    # -- schedules and retention (#16; see ``_upkeep``) ------------------------------------

    async def lock_schedule(self, schedule_id: str, *, wait: bool = True) -> ScheduleLock | None:
        """flock ``schedules/<sha>.lock``."""
        self._open(create=True)
        return await self.schedules.lock(schedule_id, wait=wait)

    async def save_schedule(self, schedule: Schedule) -> None:
        """Replace ``schedules/<sha>.json`` atomically, in a worker thread (its fsyncs must
        not stall the loop: a worker saves each of many schedules due at once). Cancelled, it
        still waits for the thread's write: the caller's flock is held until that landed."""
        self._open(create=True)
        await in_thread_to_the_end(self.schedules.save, schedule)
        self.hub.schedule_changed(self.schedules.name(schedule.id))

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule's file, read."""
        if not self._open(create=False):
            return None
        return self.schedules.get(schedule_id)

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Remove the schedule's file."""
        if not self._open(create=False):
            return False
        if not self.schedules.delete(schedule_id):
            return False
        self.hub.schedule_changed(self.schedules.name(schedule_id))
        return True

    def schedule_changes(self) -> int:
        """Schedule changes heard of in this process (``Hub.schedule_changes``): other
        processes' only while file-system events arrive (with ``WF_POLL_INTERVAL`` set, a
        worker notices them at its ``poll``)."""
        return self.hub.schedule_changes

    def run_location(self, run_id: str) -> str:
        """The run's directory."""
        return os.path.join(self.runs, run_id)

    def stream_fault(self, run_id: str, stream: str) -> tuple[str, str]:
        """``<run id>/<key>`` and the stream's files (``<run dir>/<key>``, without their
        suffix), as the listing notes a damaged one: the key, not the name (a damaged name
        file cannot say the name)."""
        key = stream_key(stream)
        return f"{run_id}/{key}", os.path.join(self.run_location(run_id), key)

    def _damaged_where(self, run_id: str) -> str:
        """Where a run that cannot be read lives: its directory, or, packed, its segment
        (its locator when that cannot be read), so that the runs of one damaged segment are
        said together (``wf.cli``'s ``say_damaged``)."""
        run_dir = self.run_dir(run_id)
        if os.path.lexists(run_dir):
            return run_dir
        try:
            loc = self.segments.locate(run_id)
        except StoreError:
            return os.path.join(self.segments.links, run_id)
        return run_dir if loc is None else self.segments.path(loc.segment)

    def schedule_location(self, schedule_id: str) -> str:
        """The schedule's file."""
        return self.schedules.path(schedule_id)

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule file, read (a damaged one is skipped: ``faults``)."""
        if not self._open(create=False):
            return []
        return self.schedules.all()

    async def due_schedules(self, now: float) -> tuple[list[Schedule], float | None]:
        """From the schedules kept in memory while file-system events of ``schedules/``
        arrive, reading again only the files they (or this process's saves) named; without
        events, every file, as ``list_schedules``."""
        if not self._open(create=False):
            return [], None
        if not (self._events and self.hub.watch(None) and self.hub.hearing_schedules()):
            self._schedule_view = None
            return await super().due_schedules(now)
        # Taken before reading: a change made while the files are read is read next time.
        news = self.hub.take_schedule_news(self._schedule_news)
        view = self._schedule_view
        if view is None or "" in news:
            view = self._schedule_view = self.schedules.by_name()
        else:
            for name in news:
                found = self.schedules.read_named(name)
                if found is None:
                    view.pop(name, None)
                else:
                    view[name] = found
        due = sorted(
            # Copies: a caller changing one must not change the view.
            (
                dataclasses.replace(s)
                for s in view.values()
                if s.next_run is not None and s.next_run <= now
            ),
            key=lambda s: s.id,
        )
        return due, _later(view, now)

    async def delete_runs(self, run_ids: Sequence[str], *, now: float, reason: str) -> Deleted:
        """Delete finished runs in a worker thread (file removal must not stall the loop)."""
        if not run_ids or not self._open(create=False):
            return Deleted()
        return await asyncio.to_thread(_upkeep.delete_runs, self, list(run_ids), now, reason)

    async def prune_tombstones(self, before: float) -> int:
        """Rewrite each ``tombstones/`` file without the old lines (in a worker thread)."""
        if not self._open(create=False):
            return 0
        pruned = await asyncio.to_thread(self.tombstones.prune, before)
        self.counters.bump("tombstones", pruned, out=True)
        return pruned

    async def get_tombstone(self, run_id: str) -> Tombstone | None:
        """The run's line in ``tombstones/``."""
        if not self._open(create=False):
            return None
        try:
            validate_run_id(run_id)
        except UsageError:
            return None
        return self.tombstones.get(run_id)

    async def compact(
        self,
        *,
        now: float,
        older_than: float,
        limit: int,
        on_progress: Progress | None = None,
    ) -> int:
        """Pack finished runs into segment files, in a worker thread (``_compact``);
        ``on_progress(done, total)`` is called with index buckets looked at."""
        if limit <= 0 or not self._open(create=False):
            return 0
        done = await asyncio.to_thread(
            _compact.compact,
            self,
            now=now,
            older_than=older_than,
            limit=limit,
            on_progress=on_progress,
        )
        return done.packed

    async def store_info(self) -> StoreStats:
        """Counts from ``counts/`` (in a worker thread)."""
        self._open(create=False)  # an older format is upgraded first
        version = _format.check_format(self.root)
        return await asyncio.to_thread(_upkeep.info, self, version)

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        """Read every run's files, packed or not (in a worker thread, which calls
        ``on_progress``); change nothing but what ``_upkeep.verify`` puts right (the counts,
        the tombstone reserve, a locator left beside its run's directory, a run's index
        entries, message posts' temporary files). A creation a power cut cut short is named,
        never removed or moved: its id's next creation replaces it."""
        if not self._open(create=False):
            return []
        return await asyncio.to_thread(_upkeep.verify, self, on_progress)

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Create or check the store, and start the watcher of ``queue/`` (with events)."""
        self._open(create=True)
        if self._events:
            self.hub.watch(None)

    async def close(self) -> None:
        """Stop watching (the last store on this directory in the process stops the thread)."""
        if not self._closed:
            self._closed = True
            for lease in self._leased_at_creation.values():  # never handed over: nobody's
                with contextlib.suppress(StoreError):
                    lease.abandon()
            self._leased_at_creation.clear()
            if self._using is not None:
                _format.release_use(self.root, self._using)
                self._using = None
            self.queue.close()
            self.hub.unsubscribe_schedules(self._schedule_news)
            self.hub.close()
            self.sequence.close()
            self.counters.close()
            if self.log is not None:
                self.log.close()


def _later(view: dict[str, Schedule], now: float) -> float | None:
    """The earliest ``next_run`` of the ``view`` after ``now``."""
    times = [s.next_run for s in view.values() if s.next_run is not None and s.next_run > now]
    return min(times, default=None)


_posts: tuple[int, dict[str, int]] | None = None


def _in_flight() -> dict[str, int]:
    """This process's posts under way, by run (a forked child starts with none: the posts of
    its parent are not its own)."""
    global _posts
    if _posts is None or _posts[0] != os.getpid():
        _posts = (os.getpid(), {})
    return _posts[1]


@contextlib.contextmanager
def _posting(run_id: str) -> Iterator[None]:
    """Count a post to ``run_id`` as under way while the block runs (``LocalStore.posting``)."""
    posts = _in_flight()
    posts[run_id] = posts.get(run_id, 0) + 1
    try:
        yield
    finally:
        left = posts.get(run_id, 1) - 1
        if left > 0:
            posts[run_id] = left
        else:
            posts.pop(run_id, None)


async def _flushed(flush: asyncio.Future[None], written: str) -> None:
    """Wait for ``flush`` (``OffLoopFlusher.request``); if it fails, or the wait is cancelled,
    remove ``written`` (what the flush was to make durable, not yet visible to anyone)."""
    try:
        await asyncio.shield(flush)
    except BaseException:
        _withdraw(flush, written)
        raise


def _withdraw(flush: asyncio.Future[None], written: str) -> None:
    """Remove ``written`` once ``flush`` is over: a flush of file by file opens what it owes
    by name, and a name gone from under it would fail the other posts of its batch."""
    if flush.done():
        _remove(written)
    else:
        flush.add_done_callback(lambda _flush: _remove(written))


def _remove(path: str) -> None:
    with contextlib.suppress(StoreError):
        _fsops.unlink(path, allow=(errno.ENOENT,))


def _after(record: RunRecord, below: int | None) -> bool:
    """Whether a page of runs created before the ``below``-th must leave out ``record``,
    reached by an entry of an older number: an entry its id's creation cut short by a power
    cut left behind, the id created again since (the record's number is the run's). Such a
    page listed the run itself, and a pager on ``before=`` asked for it forever."""
    return below is not None and record.seq >= below


def _under(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or inside it."""
    return path == directory or path.startswith(directory + os.sep)


def _staging_name(run_id: str) -> str:
    """A creation's own name in ``tmp/``: the run id, the process, and random bits from
    ``random`` (reseeded in a forked child) rather than ``os.urandom``, a system call."""
    return f"{run_id}.{_pid}.{random.getrandbits(32):08x}"


_pid = os.getpid()
"""This process's id (``os.getpid`` is a system call), updated in a forked child."""


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def _still_there(fd: int, path: str, held: os.stat_result | None = None) -> os.stat_result | None:
    """The ``fstat`` of the file open as ``fd``, or None if it is no longer the one at
    ``path`` (its run was packed or deleted, its directory renamed away, since it was
    opened). ``held``: ``fd``'s ``fstat``, taken since it was locked."""
    if held is None:
        held = os.fstat(fd)
    if held.st_nlink == 0:
        return None
    try:
        there = os.stat(path)
    except OSError:
        return None
    return held if (there.st_ino, there.st_dev) == (held.st_ino, held.st_dev) else None


def _fingerprint(run_dir: str) -> _Fingerprint:
    """Name, inode, size (the journal's: how far it is written) and mtime of each file of the
    run and its inbox: any write changes one of them."""
    return _fingerprint_of(_look(run_dir), run_dir)


def _look(run_dir: str) -> list[tuple[str, int, int, int]]:
    """``_fingerprint``'s look at the run's files, the journal's size as its length (not yet
    how far it is written)."""
    out = []
    inbox = False
    for directory, prefix in ((run_dir, ""), (os.path.join(run_dir, INBOX_DIR), "inbox/")):
        if prefix and not inbox:
            # No inbox in the listing (most runs are never posted to): none to list. One made
            # since shows in the next fingerprint's listing of the run's directory.
            break
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name == INBOX_DIR and not prefix:
                        out.append(("inbox/", entry.inode(), 0, 0))  # created by a first post
                        inbox = True
                        continue
                    if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        st = entry.stat(follow_symlinks=False)
                        out.append((prefix + entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            pass
    return out


def _fingerprint_of(
    look: list[tuple[str, int, int, int]], run_dir: str, written: int | None = None
) -> _Fingerprint:
    """The fingerprint of ``_look``'s look at ``run_dir``; ``written``: how far the journal
    is written, if the caller knows it (else its tail is read now)."""
    out = []
    for name, ino, size, mtime in look:
        if name == JOURNAL_FILE:
            # An append into the slack keeps the size, and a coarse clock may keep the mtime:
            # how far it is written changes.
            if written is None:
                written = _journal.written_length(run_dir + os.sep + JOURNAL_FILE, size)
            size = written
        out.append((name, ino, size, mtime))
    out.sort()
    return tuple(out)


_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _deliveries_gate(hooks_dir: str) -> asyncio.Lock:
    """The running loop's lock in front of the ``flock`` of ``hooks_dir``'s deliveries,
    shared by every store of the loop on that directory."""
    gates = _gates.setdefault(asyncio.get_running_loop(), {})
    gate = gates.get(hooks_dir)
    if gate is None:
        gate = gates[hooks_dir] = asyncio.Lock()
    return gate
