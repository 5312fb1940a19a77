"""The durable queue: ``queue/<due>[+tags]+<run_id>``, one empty file per due time of a run.

The name is the whole entry: listing the directory and parsing the names orders due work by
priority, time, then creation (the ``+s<seq>`` tag), without opening a file or scanning run
directories. ``<due>`` is 14 digits
of milliseconds since the epoch (``00000000000000``: due at once). A run suspended with no wake
time has no entry at all: only a post (which adds a due-now entry) can wake it.

A run may briefly have more than one entry (a post's due-now entry next to its timer, or a
leftover of a crash between two renames); readers keep each run's earliest. Entries are only
hints that point at runs: the run's record is the truth, and the lease holder brings the entries
in line with it (see ``_lease.reconcile``). An entry is therefore allowed to be *early* (a
harmless look at a run), never late: that is the rule every write order in ``_lease`` follows.
"""

from __future__ import annotations

import bisect
import errno
import heapq
import itertools
import math
import operator
import os
import time
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from wf._exceptions import RunNotFound, StoreError
from wf.store._base import WAITING_REPORTED, Pins, lane_key, pin_of_raw
from wf.store.local import _atomic, _fsops, _records
from wf.store.local._layout import (
    NOW,
    SEP,
    digest,
    entry_pin,
    entry_seq,
    entry_tags,
    lane_hash,
    lane_width,
    parse_queue_name,
    pin_hash,
    queue_name,
    queue_tag,
    run_present,
)
from wf.store.local._notify import Hub, QueueNews

Lane = tuple[str, int]
"""A group lane as entries carry it: the lane's directory name (``lane_hash``) and width."""

ORPHAN_AGE = 300.0
"""An entry whose run does not exist after this many seconds is a crashed create: removed."""


RELIST = 1.0
"""Seconds a view fed by file-system events goes without a whole listing of ``queue/``: the
safety net for events lost (an inotify queue overflow, a notifier replaced)."""


class Queue:
    """Operations on ``queue/`` of one store.

    Reads go through a *view*: the directory's names, parsed once each and kept in the two
    orders readers need (by name, by claim order), so that a claim over a backlog of thousands
    stops as soon as it has what it wants instead of parsing and sorting every entry.

    The view follows the directory without listing it every time: this process's own changes
    are applied to it as they are made (and told to the other views of this process), and
    other processes' arrive as file-system events naming the entries that changed, each
    looked up (``lexists``) when the view is next read, but for those the events only
    removed (dropped without a look: with a few workers draining a backlog, each hears every
    run the others end). It is listed whole at first, when the
    watcher starts or replaces its notifier (events may have been missed), when events are
    unavailable, and at least every ``RELIST`` seconds; a listing costs a ``listdir`` and a
    set comparison, and only the names that came or went are parsed and placed (``bisect``).
    """

    def __init__(self, root: str, *, inodes: bool = False, hub: Hub | None = None) -> None:
        """``inodes``: fingerprints carry inode numbers (for waits that poll: a post's
        due-now entry replaced over an existing one changes no name). ``hub``: counts this
        process's changes (``Hub.bump``), and gives the count a listing was taken at."""
        self.dir = os.path.join(root, "queue")
        self._runs = os.path.join(root, "runs")
        self._names = _atomic.EmptyNames(root)
        self._inodes = inodes
        self._view = _View()
        self.seen: object = None
        """What the directory looked like at the last read (a fingerprint, or the view's own
        set of names): what a wait for activity compares a new listing with."""
        self._hub = hub
        self.seen_activity: int | None = None
        """``Hub.activity`` just before the last listing (or at the end of the last wait):
        a change counted since then may not be in what the caller last saw."""
        self._tags_of: dict[str, tuple[str | None, Lane | None]] = {}
        """Run id -> hash of its named queue and its lane, from its tagged entries or, for a
        run seen only through untagged ones, its record (neither ever changes)."""
        self._unpinned: set[str] = set()
        """Runs known from their records to be pinned to no deployment."""
        self._news: QueueNews | None = None
        """Names heard to have changed since the view was last read (``""``: list it whole);
        None until the view is first read (a store that never claims keeps no view)."""
        self._listed_at = -RELIST

    def close(self) -> None:
        """Stop hearing of changes (the store is closed)."""
        if self._news is not None and self._hub is not None:
            self._hub.unsubscribe_queue(self._news)
            self._news = None

    def resync(self) -> None:
        """List the whole directory at the next read (the view may have missed a change)."""
        if self._news is not None:
            self._news[""] = False

    def _change(self, name: str, present: bool, make: Callable[[], bool]) -> bool:
        """Make (``present``) or remove the entry ``name`` by ``make()`` (True if it did), and
        tell this process: its views at once, the hub so that the watcher's report of it is
        no news (``Hub.expect``, before the change)."""
        hub = self._hub
        forget = None if hub is None else hub.expect(name, present)
        try:
            done = make()
        except BaseException:
            if forget is not None:
                forget()
            raise
        if not done:
            if forget is not None:
                forget()
            return False
        if self._news is not None:  # a view is kept (it has been read): keep it current
            if present:
                self._view.add(name)
            else:
                self._view.discard(name)
        if hub is not None:
            hub.bump()
            hub.queue_changed((name,), self._news)
        return True

    def add(self, due: str, run_id: str) -> bool:
        """Create the entry if absent; True if created (the caller syncs the directory)."""
        name = queue_name(due, run_id)
        return self._change(name, True, lambda: self._names.touch(self.dir, name))

    def remove(self, due: str, run_id: str) -> bool:
        """Remove the entry if present; True if removed (the caller syncs the directory)."""
        return self.remove_name(queue_name(due, run_id))

    def remove_name(self, name: str) -> bool:
        """Remove an entry by file name."""
        return self._change(name, False, lambda: _fsops.unlink(os.path.join(self.dir, name)))

    def poke(self, run_id: str, tag: str = "") -> None:
        """Make the run due now, durably, with a change a watcher always sees: its due-now
        entry (with the run's tags, ``queue_tag``) replaced by a new one."""
        name = queue_name(NOW + tag, run_id)
        self._change(name, True, lambda: _replaced(self.dir, name))
        self.sync()

    def sync(self) -> None:
        """Make the entry names durable."""
        _fsops.fsync_dir(self.dir)

    def exists(self, due: str, run_id: str) -> bool:
        """Whether that entry exists."""
        return os.path.exists(os.path.join(self.dir, queue_name(due, run_id)))

    # -- reading -------------------------------------------------------------------------

    def entries(self) -> list[tuple[str, str]]:
        """Every ``(due, run_id)``, earliest first (remembered for ``known_names``)."""
        view = self._list()
        return [(entry.due, entry.run_id) for entry in map(view.parsed.__getitem__, view.names)]

    def known_names(self, run_id: str) -> set[str]:
        """The run's entry names seen by the last listing of this process."""
        return set(self._view.by_run.get(run_id, ()))

    def run_exists(self, due: str, run_id: str) -> bool:
        """Whether the entry's run exists; removes the entry of a long-crashed create."""
        if run_present(os.path.join(self._runs, run_id)):
            return True
        path = os.path.join(self.dir, queue_name(due, run_id))
        try:
            # ctime, not mtime: an entry may be a link to a shared file (``EmptyNames``),
            # whose ctime every new link refreshes, so it is never older than the entry.
            age = time.time() - os.lstat(path).st_ctime
        except FileNotFoundError:
            return False
        if age > ORPHAN_AGE:
            _fsops.unlink(path, allow=(errno.ENOENT,))
        return False

    def due(
        self,
        now: float,
        limit: int,
        queues: Sequence[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[str]:
        """Run ids due at or before ``now``, each once: higher priority first, then earliest
        due, then earliest created. With ``queues``, only runs of those named queues; with
        ``deployments``, only runs pinned to one of them (None: unpinned)."""
        out: list[str] = []
        for due, run_id, _known in self.ordered(now, queues, deployments=deployments):
            if len(out) >= limit:
                break
            if self.run_exists(due, run_id):
                out.append(run_id)
        return out

    def ordered(
        self,
        now: float,
        queues: Sequence[str] | None = None,
        heads: Callable[[Lane], tuple[set[str], bool]] | None = None,
        waiting: set[str] | None = None,
        *,
        resolve: bool = True,
        deployments: Pins | None = None,
        full: dict[str, set[str]] | None = None,
    ) -> Iterator[tuple[str, str, bool]]:
        """Every ``(due, run_id, known)`` due at or before ``now``, one per run (its earliest
        entry), in claim order (higher priority first, then earliest due, then earliest created),
        from one listing made at the call; lazily, so a caller that stops early pays for what
        it took. No run is looked at (a claim's lock attempt finds out whether it exists).

        ``heads``: ``lane -> (its first runs, whether that is all of them)`` (``Lanes.heads``),
        asked once per lane when the order reaches the lane's first due entry: only those
        runs of the lane are yielded (all of them if the lane is not full), and the lane's
        other due runs are never looked at one by one. ``full``: each full lane's hash -> its
        heads, for the caller to report the runs waiting behind them (``waiting_behind``) if
        it wants them. ``waiting``: runs seen through untagged entries that wait in a full lane.

        ``known``: whether the run's lane and named queue are known (from its entries' tags,
        or remembered). A run seen only through untagged entries (most runs in no group and
        no named queue; a post's due-now mark) is unknown until its record is read: with
        ``resolve`` it is read here (once, then remembered); without, it is yielded unknown,
        for a caller that reads the record anyway (a claim, from the lease) and then tells
        ``remember``.

        ``deployments``: only runs pinned to one of them (None in it: unpinned runs), by their
        entries' ``+d`` tags; a run seen only through untagged entries is placed by its record
        (with ``resolve``), else yielded unknown for the caller to test (``wants_pin``)."""
        pins = pin_hashes(deployments)
        return self._in_order(self._list(), now * 1000, queues, heads, waiting, resolve, pins, full)

    def waiting_behind(self, full: dict[str, set[str]], now: float, waiting: set[str]) -> None:
        """Add to ``waiting`` the runs due at or before ``now`` behind the heads of each full
        lane in ``full`` (``ordered``'s), the first ``WAITING_REPORTED`` of each in claim
        order, as the last listing has them. In proportion to the lanes' lengths: a claim asks
        only when it leased nothing (``Store.claim``)."""
        for lane_hash_, first in full.items():
            limit = WAITING_REPORTED + len(first)
            behind = self._view.due_runs_of_lane(lane_hash_, now * 1000, limit)
            behind.difference_update(first)
            waiting.update(behind)

    def due_set(self, now: float) -> Container[str]:
        """The runs the last listing saw due at or before ``now`` (hence unfinished)."""
        return _DueSet(self._view, now * 1000)

    def _in_order(
        self,
        view: _View,
        now_ms: float,
        queues: Sequence[str] | None,
        heads: Callable[[Lane], tuple[set[str], bool]] | None,
        waiting: set[str] | None,
        resolve: bool,
        pins: set[str | None] | None = None,
        full: dict[str, set[str]] | None = None,
    ) -> Iterator[tuple[str, str, bool]]:
        wanted = queue_hashes(queues)
        yielded: set[str] = set()
        allowed: dict[str, set[str] | None] = {}
        """Lane hash -> the runs it lets through (None: all of them)."""

        def admit(lane: Lane) -> set[str] | None:
            if lane[0] not in allowed:
                runs: set[str] | None = None
                if heads is not None:
                    first, whole = heads(lane)
                    if not whole:
                        runs = first
                        if full is not None:
                            full[lane[0]] = first
                allowed[lane[0]] = runs
            return allowed[lane[0]]

        # A lazy merge, in claim order, of: the entries of runs known to be in no lane, the
        # untagged entries, and one source per lane, opened (its heads asked) only when the
        # merge reaches the lane's first due entry.
        merge: list[tuple[Key, int, str, Any]] = []
        ties = itertools.count()

        def push(source: Iterator[Key], kind: str) -> None:
            key = next(source, None)
            if key is not None:
                heapq.heappush(merge, (key, next(ties), kind, source))

        push(_due(view.free, now_ms), _FREE)
        push(_due(view.loose, now_ms), _LOOSE)
        for lane_hash_, keys in view.lanes.items():
            first = _first_due(keys, now_ms)
            if first is not None:
                merge.append((first, next(ties), _LANE, lane_hash_))
        heapq.heapify(merge)
        while merge:
            key, _tie, kind, source = heapq.heappop(merge)
            if kind is _LANE:
                runs = admit(view.lane_of[source])
                if runs is None:
                    push(_due(view.lanes.get(source, ()), now_ms), _LANE_RUNS)
                else:  # its few heads, found through their own entries, not the whole lane
                    push(iter(view.due_keys_of_runs(source, runs, now_ms)), _LANE_RUNS)
                continue
            push(source, kind)
            due, run_id = key[4], key[3]
            if run_id in yielded:
                continue
            tags = view.tags(due) if kind is not _LOOSE else self._known_tags(run_id)
            pin: object = None
            if pins is not None:
                pin = entry_pin(due) if kind is not _LOOSE else self._known_pin(run_id)
            if tags is None or pin is _UNKNOWN:
                if resolve:
                    if tags is None:
                        tags = self._tags(run_id)
                    if pin is _UNKNOWN:
                        pin = self._pin(run_id)
                else:
                    yielded.add(run_id)
                    yield due, run_id, False
                    continue
            queue, in_lane = tags
            if kind is _LOOSE and in_lane is not None:
                # An untagged entry of a run in a lane: the lane decides, as for its own.
                runs = admit(in_lane)
                if runs is not None and run_id not in runs:
                    if waiting is not None:
                        waiting.add(run_id)
                    continue
            if pins is not None and pin not in pins:
                # Not yielded: a re-pin cut short leaves entries of both pins, the earliest
                # of either, and the record (which the driver reads under the lease) decides.
                continue
            yielded.add(run_id)
            if wanted is not None and queue not in wanted:
                continue
            yield due, run_id, True

    def _known_pin(self, run_id: str) -> str | object | None:
        """The pin hash of a run seen through an untagged entry, from another of its entries
        (tagged ones all carry it), or known to be unpinned; else ``_UNKNOWN``."""
        for name in self._view.by_run.get(run_id, ()):
            due = self._view.parsed[name].due
            if len(due) > 14:
                return entry_pin(due)
        return None if run_id in self._unpinned else _UNKNOWN

    def _pin(self, run_id: str) -> str | None:
        """The pin hash of a run from its record (an unpinned one is remembered: a pin is only
        ever moved from one deployment to another, never given to an unpinned run)."""
        try:
            raw = _records.read_raw(os.path.join(self._runs, run_id), run_id)
        except (RunNotFound, StoreError):
            return None
        return self.pin_of_record(run_id, raw)

    def pin_of_record(self, run_id: str, raw: dict[str, Any]) -> str | None:
        """The pin hash of a run's stored record (remembered when unpinned)."""
        pin = pin_of_raw(raw)
        if pin is None:
            if len(self._unpinned) > 100_000:
                self._unpinned.clear()
            self._unpinned.add(run_id)
            return None
        return pin_hash(pin)

    def _known_tags(self, run_id: str) -> tuple[str | None, Lane | None] | None:
        """The run's tags if known without reading its record: remembered, or carried by
        another of its entries."""
        found = self._tags_of.get(run_id)
        if found is not None:
            return found
        for name in self._view.by_run.get(run_id, ()):
            due = self._view.parsed[name].due
            if len(due) > 14:
                return self.remember(run_id, self._view.tags(due))
        return None

    def _tags(self, run_id: str) -> tuple[str | None, Lane | None]:
        """The queue hash and lane of a run: known (``_known_tags``), else from its record,
        read once and remembered (neither ever changes)."""
        found = self._known_tags(run_id)
        if found is not None:
            return found
        try:
            raw = _records.read_raw(os.path.join(self._runs, run_id), run_id)
        except (RunNotFound, StoreError):
            return None, None
        return self.remember(run_id, tags_of_record(raw))

    def remember(
        self, run_id: str, tags: tuple[str | None, Lane | None]
    ) -> tuple[str | None, Lane | None]:
        """Remember a run's queue hash and lane (from its record, read by the caller)."""
        if len(self._tags_of) > 100_000:
            self._tags_of.clear()
        self._tags_of[run_id] = tags
        return tags

    def next_due_at(
        self, after: float | None = None, queues: Sequence[str] | None = None
    ) -> float | None:
        """The earliest due time of an existing run (later than ``after``), in seconds; with
        ``queues``, of a run of those named queues (by its tags, else its record)."""
        floor = -1 if after is None else after * 1000
        wanted = queue_hashes(queues)
        view = self._list()
        names = view.names
        # Names start with their due time in 14 digits, then ``+``: the entries due by
        # ``floor`` (a backlog of runs due now) are skipped by a bisection, not one by one.
        start = 0 if floor < 0 else bisect.bisect_right(names, f"{math.floor(floor):014d}~")
        for name in itertools.islice(names, start, None):
            entry = view.parsed[name]
            if entry.at <= floor:
                continue
            if wanted is not None:
                tags = view.tags(entry.due) if entry.tagged else self._tags(entry.run_id)
                if tags[0] not in wanted:
                    continue
            if self.run_exists(entry.due, entry.run_id):
                return entry.at / 1000
        return None

    def _list(self) -> _View:
        """The view, up to date with ``queue/``: from the changes heard of since the last
        read, or from a listing (see the class's docstring)."""
        hub, view = self._hub, self._view
        if hub is not None:
            self.seen_activity = hub.activity  # before: a change during it counts
        if self._inodes:
            pairs = self._scan()
            self.seen = pairs
            view.update(name for name, _ in pairs)
            return view
        news = self._news
        if news is None and hub is not None:
            news = self._news = hub.subscribe_queue()  # starts with "": a whole listing
        if news is not None and hub is not None and hub.hearing():
            # Taken before any listing: a change heard during it is looked at next time.
            heard = hub.take_queue_news(news)
            if "" not in heard and time.monotonic() - self._listed_at < RELIST:
                for name, removed in heard.items():
                    # Heard removed (and not made since): dropped without a look. A name made
                    # again since is reported again, and looked up then.
                    if not removed and os.path.lexists(os.path.join(self.dir, name)):
                        view.add(name)
                    else:
                        view.discard(name)
                self.seen = view.fingerprint
                return view
        self._listed_at = time.monotonic()
        view.update(self._listdir())
        self.seen = view.fingerprint
        return view

    def _listdir(self) -> list[str]:
        try:
            return os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as error:
            raise StoreError(f"cannot list {self.dir}: {error.strerror}") from error

    def _scan(self) -> tuple[tuple[str, int], ...]:
        try:
            with os.scandir(self.dir) as found:
                return tuple(sorted((entry.name, entry.inode()) for entry in found))
        except FileNotFoundError:
            return ()
        except OSError as error:
            raise StoreError(f"cannot list {self.dir}: {error.strerror}") from error

    def fingerprint(self) -> object:
        """What changes with every add and remove (and, with ``inodes``, every poke): the
        kind of value ``seen`` holds."""
        if self._inodes:
            return self._scan()
        return frozenset(self._listdir())


SEQ_TAG = SEP + "s"
"""What starts the ``+s<seq>`` tag of a due field (``queue_tag``: the last of them)."""

_FREE, _LOOSE, _LANE, _LANE_RUNS = "free", "loose", "lane", "lane runs"
"""The sources of ``Queue._in_order``'s merge."""

Key = tuple[int, int, int, str, str]
"""An entry's place in claim order: (-priority, due time in ms, creation number, run id, due
field)."""

_DUE_MS = operator.itemgetter(1)
_RUN_ID = operator.itemgetter(3)


class _Entry(NamedTuple):
    due: str
    """The due field with its tags (what ``queue_name`` takes back)."""
    run_id: str
    at: int
    """The due time in milliseconds."""
    key: Key
    lane: Lane | None
    """The lane its tags name (None: in no lane, or untagged)."""
    tagged: bool


class _View:
    """``queue/``'s names as last listed, parsed: in name order, and in claim order split by
    what the tags say of the run (in no lane, in a given lane, unknown)."""

    REBUILD = 64
    """More changes than this since the last listing, and more than half the view: sort
    everything again rather than place each change (a first listing of a long queue). Placing
    a change costs about as much as re-sorting two entries (a view of 3,000 entries: 4-6 ms
    to rebuild, 4-6 µs a change placed). A view kept by file-system events is listed again
    every ``RELIST`` seconds, and under load that listing differs from it by the changes
    still on their way (up to the watcher's 50 ms of debounce: hundreds of names with a few
    workers draining a backlog); each worker rebuilding its whole view for those, once a
    second, was a cost that grew with the number of workers."""

    PLACE_MAX = 2_000
    """More changes than this: sort everything again, however large the view. Placing one
    moves the list's tail (``bisect.insort``), so its cost grows with the view: 0.5 ms in a
    view of 300,000 entries (2,000 placed: 0.5 s; 149,000 placed, what half the view allowed:
    57 s, against 7 s to sort it whole)."""

    def __init__(self) -> None:
        self.parsed: dict[str, _Entry] = {}
        self.names: list[str] = []
        """Entry names in name order (due time first): ``next_due_at`` stops at the first."""
        self.free: list[Key] = []
        """Keys of tagged entries of runs in no lane, in claim order."""
        self.loose: list[Key] = []
        """Keys of untagged entries, in claim order."""
        self.lanes: dict[str, list[Key]] = {}
        """Lane hash -> keys of its runs' tagged entries, in claim order."""
        self.lane_of: dict[str, Lane] = {}
        """Lane hash -> the lane (hash, width) as its entries' tags give it."""
        self.by_run: dict[str, set[str]] = {}
        self.fingerprint: set[str] = set()
        """Every name in the directory as the view knows it, temporary files included."""
        self._tags: dict[str, tuple[int, str | None, Lane | None]] = {}

    def tags(self, due: str) -> tuple[str | None, Lane | None]:
        """The named-queue hash and lane a tagged due field names (``entry_tags``)."""
        _priority, queue, lane = self._shape(due)[0]
        return queue, lane

    def _shape(self, due: str) -> tuple[tuple[int, str | None, Lane | None], int]:
        """``entry_tags`` of a tagged due field, and the creation number its last tag gives
        (``entry_seq``). Remembered by the tags between the due time and that number, which
        all the runs of a lane (of a priority, a queue) share: each run's own due field is
        parsed once, not once per entry made and once per claim."""
        at = due.rfind(SEQ_TAG, 14)
        seq = due[at + 2 :] if at >= 0 else ""
        numbered = seq.isascii() and seq.isdigit()
        shape = due[14:at] if numbered else due[14:]
        found = self._tags.get(shape)
        if found is None:
            if len(self._tags) > 10_000:
                self._tags.clear()
            found = self._tags[shape] = entry_tags(due)
        return found, int(seq) if numbered else entry_seq(due)

    def due_runs_of_lane(self, lane_hash_: str, now_ms: float, limit: int) -> set[str]:
        """The first ``limit`` runs, in claim order, with a tagged entry in the lane due by
        ``now_ms``."""
        keys = self.lanes.get(lane_hash_, ())
        if keys and keys[0][0] == keys[-1][0]:
            # One priority (the usual lane): claim order is due order, so the due entries are
            # a prefix, found by bisection and read at C speed (every claim that meets a full
            # lane asks, and a lane may hold thousands of runs).
            end = min(bisect.bisect_right(keys, now_ms, key=_DUE_MS), limit)
            runs = set(map(_RUN_ID, itertools.islice(keys, end)))
            if len(runs) == end:  # else a run has two entries there: counted one by one below
                return runs
        found: set[str] = set()
        for key in keys:
            if len(found) >= limit:
                break
            if key[1] <= now_ms:
                found.add(key[3])
        return found

    def due_keys_of_runs(self, lane_hash_: str, runs: Iterable[str], now_ms: float) -> list[Key]:
        """The keys, in claim order, of the lane's tagged entries of ``runs`` due by ``now_ms``:
        the lane's keys filtered by run, found through the runs' own entries."""
        keys: list[Key] = []
        for run_id in runs:
            for name in self.by_run.get(run_id, ()):
                entry = self.parsed.get(name)
                if (
                    entry is not None
                    and entry.tagged
                    and entry.lane is not None
                    and entry.lane[0] == lane_hash_
                    and entry.key[1] <= now_ms
                ):
                    keys.append(entry.key)
        keys.sort()
        return keys

    def _keys_for(self, entry: _Entry) -> list[Key]:
        if not entry.tagged:
            return self.loose
        if entry.lane is None:
            return self.free
        keys = self.lanes.get(entry.lane[0])
        if keys is None:
            keys = self.lanes[entry.lane[0]] = []
            self.lane_of[entry.lane[0]] = entry.lane
        return keys

    def update(self, listed: Iterable[str]) -> None:
        """Make the view the listing ``listed`` (every name in ``queue/``)."""
        names = set(listed)
        if names == self.fingerprint:
            return
        gone = self.fingerprint - names
        came = names - self.fingerprint
        if len(gone) + len(came) > max(self.REBUILD, min(len(self.parsed) // 2, self.PLACE_MAX)):
            self.fingerprint = names
            self._rebuild(names)
            return
        for name in gone:
            self.discard(name)
        for name in came:
            self.add(name)

    def add(self, name: str) -> None:
        """A name now in the directory (an entry made, or heard of)."""
        if name in self.fingerprint:
            return
        self.fingerprint.add(name)
        entry = self._parse(name)
        if entry is None:
            return
        self.parsed[name] = entry
        bisect.insort(self.names, name)
        bisect.insort(self._keys_for(entry), entry.key)
        self.by_run.setdefault(entry.run_id, set()).add(name)

    def discard(self, name: str) -> None:
        """A name no longer in the directory."""
        if name not in self.fingerprint:
            return
        self.fingerprint.discard(name)
        entry = self.parsed.pop(name, None)
        if entry is None:
            return
        _discard(self.names, name)
        keys = self._keys_for(entry)
        _discard(keys, entry.key)
        if not keys and entry.lane is not None and entry.tagged:
            del self.lanes[entry.lane[0]]
            self.lane_of.pop(entry.lane[0], None)
        others = self.by_run.get(entry.run_id)
        if others is not None:
            others.discard(name)
            if not others:
                del self.by_run[entry.run_id]

    def _rebuild(self, names: set[str]) -> None:
        parsed: dict[str, _Entry] = {}
        for name in names:
            entry = self.parsed.get(name) or self._parse(name)
            if entry is not None:
                parsed[name] = entry
        self.parsed = parsed
        self.names = sorted(parsed)
        self.free, self.loose, self.lanes, self.lane_of, self.by_run = [], [], {}, {}, {}
        for name, entry in parsed.items():
            self._keys_for(entry).append(entry.key)
            self.by_run.setdefault(entry.run_id, set()).add(name)
        for keys in (self.free, self.loose, *self.lanes.values()):
            keys.sort()

    def _parse(self, name: str) -> _Entry | None:
        parsed = parse_queue_name(name)
        if parsed is None:
            return None
        due, run_id = parsed
        at = int(due[:14])
        if len(due) == 14:
            return _Entry(due, run_id, at, (0, at, 0, run_id, due), None, False)
        if due[14:16] == "+s" and due.isascii() and due[16:].isdigit():
            # Only the creation number (a run of priority 0 in no lane and no named queue,
            # unpinned: most entries): what ``entry_tags`` and ``entry_seq`` would say. Every
            # worker parses every entry of the backlog when it first lists it.
            return _Entry(due, run_id, at, (0, at, int(due[16:]), run_id, due), None, True)
        (priority, _queue, lane), seq = self._shape(due)
        return _Entry(due, run_id, at, (-priority, at, seq, run_id, due), lane, True)


class _DueSet:
    """``run_id in due_set``: whether the view holds an entry of it due by ``now_ms``."""

    def __init__(self, view: _View, now_ms: float) -> None:
        self._view, self._now_ms = view, now_ms

    def __contains__(self, run_id: object) -> bool:
        names = self._view.by_run.get(run_id) if isinstance(run_id, str) else None
        if names is not None:
            parsed, now_ms = self._view.parsed, self._now_ms
            for name in names:  # (a loop, not ``any``: asked for each lane's head per claim)
                if parsed[name].at <= now_ms:
                    return True
        return False


def _due(keys: Iterable[Key], now_ms: float) -> Iterator[Key]:
    """The keys (a snapshot of them) due by ``now_ms``, in their order."""
    for key in list(keys):
        if key[1] <= now_ms:
            yield key


def _first_due(keys: list[Key], now_ms: float) -> Key | None:
    for key in keys:
        if key[1] <= now_ms:
            return key
    return None


_UNKNOWN = object()
"""``Queue._known_pin``: the listing does not tell the run's pin."""


def pin_hashes(deployments: Pins | None) -> set[str | None] | None:
    """The hashes entries' ``+d`` tags carry for these deployments (None stays None: unpinned
    runs), or None for every run."""
    if deployments is None:
        return None
    return {None if d is None else pin_hash(d) for d in deployments}


def queue_hashes(queues: Sequence[str] | None) -> set[str] | None:
    """The hashes entries' tags carry for these named queues (None: every queue)."""
    return None if queues is None else {digest(q, 8) for q in queues}


def raw_tag(raw: dict[str, Any]) -> str:
    """``record_tag`` of a stored record, read as JSON (no ``RunRecord`` built)."""
    queue, group = raw.get("queue"), raw.get("group")
    lane = None
    if group is not None:
        lane = lane_key(str(raw.get("workflow")), None if queue is None else str(queue), str(group))
    width = lane_width(raw.get("limits")) if lane is not None else 1
    seq = int(raw.get("seq") or 0)
    return queue_tag(int(raw.get("priority") or 0), queue, lane, width, seq, pin_of_raw(raw))


def tags_of_record(raw: dict[str, Any]) -> tuple[str | None, Lane | None]:
    """The named-queue hash and lane (hash, width) of a stored record."""
    queue, group = raw.get("queue"), raw.get("group")
    lane = None
    if group is not None:
        lane = lane_key(str(raw.get("workflow")), None if queue is None else str(queue), str(group))
    return tags_of(queue, lane, raw.get("limits"))


def tags_of(
    queue: Any, lane_name: str | None, limits: dict[str, Any] | None
) -> tuple[str | None, Lane | None]:
    """The named-queue hash and lane (hash, width) of a run with these fields (``lane_name``:
    ``lane_of``)."""
    lane: Lane | None = None
    if lane_name is not None:
        lane = (lane_hash(lane_name), lane_width(limits))
    return None if queue is None else digest(str(queue), 8), lane


def _replaced(directory: str, name: str) -> bool:
    _atomic.replace_empty(directory, name)
    return True


def _discard(items: list[Any], item: Any) -> None:
    """Remove ``item`` from the sorted list ``items`` if it is there."""
    at = bisect.bisect_left(items, item)
    if at < len(items) and items[at] == item:
        del items[at]
