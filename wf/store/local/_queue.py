"""The durable queue: ``queue/<due>+<run_id>``, one empty file per due time of a run.

The name is the whole entry: listing the directory and sorting the names orders due work by
time, then by run id, without opening a file or scanning run directories. ``<due>`` is 14 digits
of milliseconds since the epoch (``00000000000000``: due at once). A run suspended with no wake
time has no entry at all: only a post (which adds a due-now entry) can wake it.

A run may briefly have more than one entry (a post's due-now entry next to its timer, or a
leftover of a crash between two renames); readers keep each run's earliest. Entries are only
hints that point at runs: the run's record is the truth, and the lease holder brings the entries
in line with it (see ``_lease.reconcile``). An entry is therefore allowed to be *early* (a
harmless look at a run), never late: that is the rule every write order in ``_lease`` follows.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator, Sequence

from wf._exceptions import RunNotFound, StoreError
from wf.store.local import _atomic, _fsops, _records
from wf.store.local._layout import (
    NOW,
    digest,
    entry_tags,
    lane_hash,
    parse_queue_name,
    queue_name,
    run_exists,
)

Lane = tuple[str, int]
"""A group lane as entries carry it: the lane's directory name (``lane_hash``) and width."""

ORPHAN_AGE = 300.0
"""An entry whose run does not exist after this many seconds is a crashed create: removed."""


class Queue:
    """Operations on ``queue/`` of one store."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, "queue")
        self._runs = os.path.join(root, "runs")
        self._names = _atomic.EmptyNames(root)
        self._scan: list[str] = []
        self._by_run: dict[str, set[str]] | None = None
        self.seen: tuple[tuple[str, int], ...] | None = None
        """Fingerprint of the last scan: what a wait for activity compares against."""
        self._tags_of: dict[str, tuple[str | None, Lane | None]] = {}
        """Run id -> hash of its named queue and its lane, for untagged entries (neither
        ever changes)."""

    def add(self, due: str, run_id: str) -> bool:
        """Create the entry if absent; True if created (the caller syncs the directory)."""
        return self._names.touch(self.dir, queue_name(due, run_id))

    def remove(self, due: str, run_id: str) -> bool:
        """Remove the entry if present; True if removed (the caller syncs the directory)."""
        return _fsops.unlink(os.path.join(self.dir, queue_name(due, run_id)))

    def remove_name(self, name: str) -> bool:
        """Remove an entry by file name."""
        return _fsops.unlink(os.path.join(self.dir, name))

    def poke(self, run_id: str) -> None:
        """Make the run due now, durably, with a change a watcher always sees."""
        _atomic.replace_empty(self.dir, queue_name(NOW, run_id))
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
        pairs = self._list()
        self.seen = pairs
        names = [name for name, _ in pairs]
        self._scan, self._by_run = names, None
        out = []
        for name in names:
            parsed = parse_queue_name(name)
            if parsed is not None:
                out.append(parsed)
        return out

    def known_names(self, run_id: str) -> set[str]:
        """The run's entry names seen by the last ``entries`` scan of this process."""
        if self._by_run is None:
            by_run: dict[str, set[str]] = {}
            for name in self._scan:
                parsed = parse_queue_name(name)
                if parsed is not None:
                    by_run.setdefault(parsed[1], set()).add(name)
            self._by_run = by_run
        return set(self._by_run.get(run_id, ()))

    def run_exists(self, due: str, run_id: str) -> bool:
        """Whether the entry's run exists; removes the entry of a long-crashed create."""
        if run_exists(os.path.join(self._runs, run_id)):
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

    def due(self, now: float, limit: int, queues: Sequence[str] | None = None) -> list[str]:
        """Run ids due at or before ``now``, each once: higher priority first, then earliest
        due, then oldest id. With ``queues``, only runs of those named queues."""
        out: list[str] = []
        for due, run_id in self.ordered(now, queues):
            if len(out) >= limit:
                break
            if self.run_exists(due, run_id):
                out.append(run_id)
        return out

    def ordered(
        self,
        now: float,
        queues: Sequence[str] | None = None,
        lanes: dict[str, Lane | None] | None = None,
        listed: set[str] | None = None,
    ) -> Iterator[tuple[str, str]]:
        """Every ``(due, run_id)`` due at or before ``now``, one per run (its earliest entry),
        in ``due``'s order, from one listing (made at the call): no run is looked at (a
        claim's lock attempt finds out whether the run exists).

        ``lanes``: filled with the group lane (hash, width) of each run yielded, or None for a
        run in no group (from the entries' tags; a run seen only through untagged entries is
        read once, then remembered). ``listed``: filled with every run yielded, at once."""
        best: dict[str, tuple[int, str, str]] = {}
        tagged: dict[str, tuple[str | None, Lane | None]] = {}
        now_ms = now * 1000
        for due, run_id in self.entries():
            if int(due[:14]) > now_ms:
                break
            priority, queue, lane = entry_tags(due)
            if len(due) > 14:
                tagged[run_id] = (queue, lane)
            key = (-priority, due, run_id)
            found = best.get(run_id)
            if found is None or key < found:
                best[run_id] = key
        if listed is not None:
            listed.update(best)
        return self._in_order(best, tagged, queues, lanes)

    def _in_order(
        self,
        best: dict[str, tuple[int, str, str]],
        tagged: dict[str, tuple[str | None, Lane | None]],
        queues: Sequence[str] | None,
        lanes: dict[str, Lane | None] | None,
    ) -> Iterator[tuple[str, str]]:
        wanted = None if queues is None else {digest(q, 8) for q in queues}
        for _, due, run_id in sorted(best.values(), key=lambda k: (k[0], k[1][:14], k[2])):
            if wanted is not None or lanes is not None:
                # Read lazily: an untagged entry's run is read only if the caller gets that far.
                queue, lane = tagged[run_id] if run_id in tagged else self._untagged(run_id)
                if wanted is not None and queue not in wanted:
                    continue
                if lanes is not None:
                    lanes[run_id] = lane
            yield due, run_id

    def _untagged(self, run_id: str) -> tuple[str | None, Lane | None]:
        """The queue hash and lane of a run seen only through untagged entries (a post's
        due-now entry): read from its record once, then remembered (neither ever changes)."""
        if run_id not in self._tags_of:
            try:
                raw = _records.read_raw(os.path.join(self._runs, run_id), run_id)
            except (RunNotFound, StoreError):
                return None, None
            queue = raw.get("queue")
            group = raw.get("group")
            lane: Lane | None = None
            if group is not None:
                width = int((raw.get("limits") or {}).get("group_concurrency", 1))
                lane = (lane_hash(str(group)), width)
            if len(self._tags_of) > 100_000:
                self._tags_of.clear()
            self._tags_of[run_id] = (None if queue is None else digest(queue, 8), lane)
        return self._tags_of[run_id]

    def next_due_at(self, after: float | None = None) -> float | None:
        """The earliest due time of an existing run (later than ``after``), in seconds."""
        floor = -1 if after is None else after * 1000
        for due, run_id in self.entries():
            at = int(due[:14])
            if at > floor and self.run_exists(due, run_id):
                return at / 1000
        return None

    def _list(self) -> tuple[tuple[str, int], ...]:
        try:
            with os.scandir(self.dir) as found:
                return tuple(sorted((entry.name, entry.inode()) for entry in found))
        except FileNotFoundError:
            return ()
        except OSError as error:
            raise StoreError(f"cannot list {self.dir}: {error.strerror}") from error

    def fingerprint(self) -> tuple[tuple[str, int], ...]:
        """Names and inode numbers: changes with every add, remove and poke."""
        return self._list()
