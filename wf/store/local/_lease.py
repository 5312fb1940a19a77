"""The lease: an exclusive ``flock`` on ``runs/<id>/journal.jsonl``, and all only its holder does.

``flock`` locks belong to an open file description, so a second ``LocalStore`` in the same
process (which opens the file again) is excluded just like another process, and the kernel
drops the lock when the holder dies: an orphaned run is recovered by the next ``try_acquire``,
with no lease expiry to wait for.

Write ordering of ``save`` (see ``docs/store.md``): the queue may be *early* but never *late*,
and whenever the index or the queue may disagree with the record, a due-now queue entry exists,
so a crash between any two steps leaves the run due: the next holder looks at it and
``reconcile`` brings the index and queue back in line with the record.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wf._exceptions import StoreCorrupted, StoreError, UsageError
from wf.store import _forks
from wf.store._base import (
    Event,
    InboxMessage,
    Lease,
    LogEntry,
    RunRecord,
    Store,
    brought_up_to,
    created_record,
    lane_of,
)
from wf.store.local import _atomic, _fsops, _journal, _logs, _records
from wf.store.local._commit import Committer, committer_for
from wf.store.local._layout import (
    INBOX_DIR,
    JOURNAL_FILE,
    NOW,
    RUN_FILE,
    index_name,
    index_status,
    queue_name,
    record_due,
    record_tag,
)
from wf.store.local._streams import StreamWriter
from wf.store.local._upkeep import lost_outcome

if TYPE_CHECKING:
    from wf.store.local._store import LocalStore

_MESSAGE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
"""What an inbox message id may look like: it becomes a file name."""


class LocalLease(Lease):
    """The right to drive one run, held as an exclusive lock on its journal."""

    soon_outlives_process = True  # ``append_soon`` pwrites at once: the page cache keeps it

    def __init__(
        self,
        store: LocalStore,
        run_id: str,
        journal_fd: int,
        lock_fd: int | None,
        data: dict[str, Any] | None,
        created_size: int | None = None,
        *,
        settle: bool = False,
        known: bytes | None = None,
        device: int | None = None,
        journal: tuple[list[Event] | None, int, int] | None = None,
        rebuilt: RunRecord | None = None,
        committer: Committer | None = None,
        has_file: bool | None = None,
        listed: str | None = None,
        created: RunRecord | None = None,
        run_dir: str | None = None,
        inbox_news: int | None = None,
    ) -> None:
        """``journal_fd``: the journal, open for writing and locked (the lease itself);
        ``lock_fd``: a format-1 store's locked ``lock`` file. The lease owns both.
        ``created_size``: where the journal's content ended when this process created the run,
        if it did and has not leased it since; a journal still ending there means nobody has
        driven the run, so its queue and index entries are as creation wrote them. ``settle``: the
        store keeps a creation log, so the run's names may not be durable yet: the lease's
        first flush is a ``syncfs`` (``_creations``). ``known``: the journal's whole content,
        when the caller knows it (this process created the run, nobody has driven it since,
        and it has no ``run.json``): ``data`` is then None, the record is the one the
        journal rebuilds, and neither is read back from the files. ``device``: the journal's
        ``st_dev``, if the caller has it at hand. ``journal``: the journal as the caller read
        it through ``journal_fd`` (``_journal.read_repaired``): its events (None if they do not
        parse), where its content ends and the file's length (``read_run`` then hands the events
        out instead of reading them again). ``rebuilt``: the record, when the caller rebuilt it
        from the journal (``_records.read_for_lease``: exact, its values inline, so it is
        neither parsed again nor read from ``data``, which may be None then); ``has_file``:
        whether that read found a ``run.json`` (None: look). ``listed``: a queue entry of the
        run's that the caller found there with the lock held (a claim's), so it is not made
        again. ``created``: the record the journal's first event carries, if the caller made
        it from ``journal`` (``created_record``): not parsed again for the first save.
        ``run_dir``: the run's directory, if the caller has it (its id validated).
        ``inbox_news``: the store's count of posts heard (``InboxWatchers.news``) taken before
        a look, with the lock held, that found the run without an inbox (``_no_inbox``)."""
        self._dir = store.run_dir(run_id) if run_dir is None else run_dir
        self._journal = os.path.join(self._dir, JOURNAL_FILE)
        self._known: list[Event] | None = None
        """The journal's events, parsed from ``known``, until ``read_run`` hands them out."""
        self._as_created: RunRecord | None = created
        """The record the journal's first event carries (``created_record``), once read: what
        a save compares against (``_records.needs_file``) without parsing it again."""
        if known is not None:
            self._known = _journal.parse(known, self._journal)
            self._as_created = created_record(self._known[0]) if self._known else None
            if self._as_created is None:  # pragma: no cover - creation wrote this very journal
                raise StoreError(f"{self._journal}: cannot rebuild the run's record")
            # No blobs (the journal gives the record back) and nothing to read back: the
            # record is the one the journal rebuilds.
            record = brought_up_to(self._as_created.copy(), self._known[:1] + self._known[1:][-1:])
        elif rebuilt is not None:
            record = rebuilt  # exact, its values inline: no JSON of it made or parsed
        else:
            assert data is not None
            record = RunRecord.from_json(data)
        self.run_id = run_id
        self._store = store
        self._lock_fd = lock_fd
        self._fd = journal_fd
        self._device = os.fstat(self._fd).st_dev if device is None else device
        self._since = _fsops.mark(self._dir, self._device)
        """Before every write through the lease: what its flushes must cover (a whole flush
        of the file system that failed since then, for anyone, fails the lease's too)."""
        # A lease lives on the loop that took it (the driver's): its committer looked up once
        # (``committer``: by the claim that took it, once for all its leases).
        self._committer = committer or committer_for(asyncio.get_running_loop())
        self._streams: dict[str, StreamWriter] = {}
        self._tag = record_tag(record)
        self._now = NOW + self._tag
        """The run's due-now entry: a pending or running run's, and a post's mark."""
        self._pin = record.deployment
        self._due = record_due(record.status, record.wake_at, self._tag)
        self._status = record.status
        self._seq = record.seq
        """The run's creation number: given at creation, never changed by a save."""
        self._lane = lane_of(record)
        self._rejoined = False
        """Whether a retry's journal event made this ended run re-enter its lane already."""
        self._index = index_name(
            self._seq, record.id, record.status, record.workflow, record.parent_id
        )
        self._blobs = set() if data is None else _records.blob_names(data)
        if has_file is None:
            has_file = known is None and os.path.exists(os.path.join(self._dir, RUN_FILE))
        self._has_file = has_file
        self._ends: list[Event] | None = None
        """The journal's first and last events, once read (``read_run``): what a record
        rebuilt from the journal would be made of."""
        self._stored = data
        self._record: RunRecord | None = rebuilt
        """The exact record (large values loaded) once read or saved: the holder's view."""
        self._broken: StoreError | None = None
        self._released = False
        self._inbox_news = inbox_news
        """Until the first read of the inbox: see ``read_inbox``."""
        self._settle = settle
        # On failure here the caller (``try_acquire``) closes the descriptors it handed over.
        # Where the content ends (the next append's offset), and the file's length.
        self._size: int
        self._length: int
        if known is not None:
            # Whole lines then creation's slack: no torn tail to cut off.
            self._size, self._length = len(known), _journal.padded(len(known))
            self._record = record  # no large values: the record is exact as it is
            _forks.hold(self)
            return
        if journal is None:
            self._size, self._length = _journal.repair_tail(self._fd, self._journal)
        else:
            self._known, self._size, self._length = journal
        if self._size != created_size:
            # A run has one index entry, renamed from status to status (``Index.set``), and
            # it does not move while the lock is held: found under the status the journal
            # gives, it says the run has not ended, so no ended entry is looked for.
            entered = self._store.index.has(self._seq, self._index)
            if not entered and not record.status.is_terminal:
                self._refuse_lost_outcome(record)
            self._reconcile(record, listed, entered)
        _forks.hold(self)

    def _refuse_lost_outcome(self, record: RunRecord) -> None:
        """A run whose index entries say it ended while its journal holds no outcome lost
        lines it had made durable (``_upkeep.lost_outcome``): damaged, not driven. A post
        makes it due, and its lease read it as pending from the cut journal, set its index
        back toward it and replayed its steps. Only a run not created by this process whose
        index entry is not under the journal's status is looked at (three ``lstat``)."""
        said = lost_outcome(
            self._store.index, self._dir, self.run_id, self._seq, record.workflow,
            record.parent_id,
        )  # fmt: skip
        if said is not None:
            raise StoreCorrupted(
                f"run {self.run_id}: {self._journal} holds no outcome but its index entries "
                f"say {said}: the journal lost lines it had recorded; not driven (restore "
                "the run from a backup)"
            )

    def lock_fds(self) -> list[int]:
        """The journal's locked descriptor (and a format-1 store's ``lock`` file's)."""
        return [self._fd] if self._lock_fd is None else [self._fd, self._lock_fd]

    def forked(self) -> None:
        """In a forked child (``_forks``): the lock stays the parent's, and goes when it dies."""
        self._broken = StoreError("a forked child holds no lease of its parent's")
        _forks.let_go(self)

    # -- journal --------------------------------------------------------------------------

    def _check(self) -> None:
        if self._released:
            raise StoreError(f"lease on run {self.run_id} was released")
        if self._broken is not None:
            raise StoreError(f"lease on run {self.run_id} is unusable: {self._broken}")

    def _write(self, events: Sequence[Event]) -> None:
        self._check()
        self._known = None  # ``read_run`` reads the journal as it is from now on
        data = _journal.encode(events, self._journal)
        if self._status.is_terminal and not self._rejoined:
            self._reopen(events)
        end = self._size + len(data)
        # Into the slack; past it, the file grows by whole blocks of slack at once.
        written = data if end <= self._length else data + _journal.slack(end)
        try:
            _fsops.write_all(self._fd, written, self._journal, self._size)
        except StoreError as error:
            # A partial write would leave a line that later appends continue: zero it (and cut
            # off what it grew), or, if even that fails, refuse every further append here.
            try:
                if end > self._length:
                    _fsops.truncate(self._fd, self._length, self._journal)
                reach = min(end, self._length) - self._size
                left = _fsops.pread(self._fd, reach, self._size, self._journal)
                if left.strip(b"\0"):
                    _fsops.write_all(self._fd, b"\0" * len(left), self._journal, self._size)
            except StoreError:
                self._broken = error
            raise
        self._size = end
        if end > self._length:
            self._length = _journal.padded(end)
        ends = self._ends
        if ends is not None and events:
            # The journal's first event and its last: only the last moves (no list rebuilt).
            if len(ends) > 1:
                ends[1] = events[-1]
            elif ends:
                ends.append(events[-1])
            else:
                self._ends = [events[0], events[-1]] if len(events) > 1 else [events[0]]
        self._store.hub.touch(self.run_id)

    def _reopen(self, events: Sequence[Event]) -> None:
        """Before the journal says an ended run is unfinished again (a retry's event, which
        ``record_from_journal`` reads as pending): make it due, and give it its new place in
        its lane. Durably first, so a crash after the event never leaves a pending run that
        nothing drives, or one without a place that waits behind its whole group while the
        runs started after it do not wait for it. A crash before the event leaves an ended
        run due (a harmless look) and a lane entry its readers drop (``_lanes``)."""
        retry = next((e for e in events if e.get("type") == "run_retrying"), None)
        if retry is None:
            return
        queue = self._store.queue
        if queue.add(self._now, self.run_id):
            queue.sync()
        if self._lane is not None:
            attempt = int(retry.get("attempt") or 1)
            store = self._store
            store.lanes.join(self._lane, self.run_id, store.sequence.take, attempt=attempt)
            self._rejoined = True
        self._store.hub.touch("")

    async def append(self, events: Sequence[Event]) -> None:
        """Write the events and return once they are durable (sharing the flush)."""
        self._write(events)
        try:
            await self._commit(self._fd, self._journal)
        except StoreError as error:
            self._broken = error
            raise

    async def _commit(self, fd: int, path: str) -> None:
        """Return once ``fd`` is durable; the first time, with every name of the run too."""
        if not self._settle:
            await self._committer.commit(fd, path, self._device, self._since)
            return
        self._committer.check(fd)
        # The run's names were written at its creation, before this lease's mark: its line
        # in the creation log vouches for them, and the log's mark is at most its creation's.
        logged = self._store.log
        since = self._since if logged is None else min(self._since, logged.since)
        self._committer.mark(fd, path, self._device, since)
        await self._committer.sync_file_system(self._dir, self._device, since)
        self._settle = False

    def append_soon(self, events: Sequence[Event]) -> None:
        """Write the events; the next flush (any append's, or ``release``) makes them durable."""
        self._write(events)
        self._committer.mark(self._fd, self._journal, self._device, self._since)

    def append_pending(self, events: Sequence[Event]) -> bool:
        """Write the events now (a failed write raises); ``settle``, the next ``append`` or
        ``release`` flushes them: one ``fdatasync`` of the journal covers every byte in it."""
        self._write(events)  # as ``append_soon`` (one call fewer: once per step)
        self._committer.mark(self._fd, self._journal, self._device, self._since)
        return True

    async def settle(self) -> None:
        """Flush the journal if it has bytes no flush has covered yet."""
        if not self._committer.is_dirty(self._fd):
            return
        self._check()
        try:
            await self._commit(self._fd, self._journal)
        except StoreError as error:
            self._broken = error
            raise

    async def read_run(self, store: Store) -> tuple[RunRecord, list[Event]]:
        """The record read when the lease was taken (or last saved) and the journal, read
        through the lease's own descriptor: no second open, lookup or parse of the record."""
        self._check()
        if self._record is None:
            assert self._stored is not None  # read from the files when the lease was taken
            self._record = _records.with_blobs(self._dir, self._stored)
        if self._known is not None:
            journal, self._known = self._known, None  # parsed once, handed out once
        else:
            journal = _journal.read_fd(self._fd, self._size, self._journal)
        self._ends = journal[:1] + journal[1:][-1:]
        return self._record.copy(), journal

    async def read_inbox(self, store: Store) -> list[InboxMessage]:
        """The run's messages, read without looking the run up again: it exists, and cannot
        go away while its lease is held."""
        if store is not self._store:
            return await store.read_inbox(self.run_id)
        self._check()
        news, self._inbox_news = self._inbox_news, None
        hub = self._store.hub
        if news is not None and news == hub.inboxes.news and hub.hearing():
            # The run had no inbox when its lease was taken, and no post was heard of since:
            # nothing to list (most runs are never posted to). A post from now on is heard by
            # the driver's watch, set before this read (``InboxNews``).
            return []
        return self._store.read_inbox_of(self._dir)

    # -- record, queue, index -------------------------------------------------------------

    async def save(self, record: RunRecord) -> None:
        """Replace the record atomically, then bring the queue and index entries in line."""
        self._check()
        if record.id != self.run_id:
            raise StoreError(f"lease on run {self.run_id} cannot save run {record.id}")
        store, queue = self._store, self._store.queue
        record.seq = self._seq  # a run's place in the sequence never moves
        stale_now: str | None = None
        repinned_from: str | None = None
        if record.deployment != self._pin:
            repinned_from = self._pin
            # Re-pinned (``wf deployments upgrade``): the entries carry the new ``+d`` tag, and
            # the due-now entry of the old one goes with the old entry.
            stale_now = self._now
            self._tag, self._pin = record_tag(record), record.deployment
            self._now = NOW + self._tag
        old_due, new_due = self._due, record_due(record.status, record.wake_at, self._tag)
        new_index = index_name(
            self._seq, record.id, record.status, record.workflow, record.parent_id
        )
        moving = old_due != new_due or new_index != self._index
        changed = False
        if moving and not _due_now(old_due) and not _due_now(new_due):
            # Neither state keeps a due-now entry through the change: add one, so that a crash
            # before the end leaves the run due (a harmless look) rather than mis-indexed. (A
            # tagged due-now entry is one: a grouped run's ends without a directory flush.)
            changed |= queue.add(self._now, self.run_id)
        if new_due is not None and new_due != old_due and (old_due is None or new_due < old_due):
            changed |= queue.add(new_due, self.run_id)  # earlier: the new entry goes first
        if changed:
            queue.sync()
        if stale_now is not None and record.deployment is not None:
            # Before the record: a crash in between leaves an extra candidate under the new
            # tag (the record rejects it), never a re-pinned run that listings by tag miss.
            store.index.retag(self._seq, self.run_id, None, ("d", record.deployment))

        if self._ends and self._as_created is None:
            self._as_created = created_record(self._ends[0])
        if self._ends is not None and not _records.needs_file(record, self._ends, self._as_created):
            # The journal's ends give this record back: no file to write (readers rebuild
            # it), and an older one must go, or readers would prefer it.
            blobs: list[str] = []
            if self._has_file:
                _fsops.unlink(os.path.join(self._dir, RUN_FILE))
                self._has_file = False
        else:
            data, blobs = _records.encode(record, self._dir, sync_dir=True)
            # The record summarises the journal, which is durable: replace it atomically but
            # without fsyncs; a record lost to a power cut is rebuilt from the journal on read.
            _atomic.replace_cache(self._dir, RUN_FILE, data)
            self._has_file = True
        for stale in self._blobs - set(blobs):
            _fsops.unlink(os.path.join(self._dir, stale))
        self._blobs = set(blobs)
        self._record = record.copy()

        if stale_now is not None and repinned_from is not None:
            # The old tag's entry after the record: until then it is the run's.
            store.index.retag(self._seq, self.run_id, ("d", repinned_from), None)
        if new_index != self._index:
            store.index.set(self._seq, self.run_id, new_index, self._index, sync=False)
            store.counters.move(index_status(self._index), record.status.value)
            self._index = new_index
        changed = False
        # An unchanged due entry is there already: the lease made sure of it (``_reconcile``,
        # or creation wrote it), and while it is held only posts touch it, renaming over it.
        if (
            new_due is not None
            and new_due != old_due
            and queue.add(new_due, self.run_id)  # later: after the record
        ):
            # The new entry must be durable before an old one can go: a crash in between then
            # leaves the run due (early at worst), never without an entry.
            queue.sync()
            changed = True
        removed_now = False
        # The old entry first and the due-now marker last: until the very end, the run is due.
        # Removals need no barrier: an entry that outlives a crash only causes a harmless look.
        for due in dict.fromkeys((old_due, stale_now, self._now)):
            if due is not None and due != new_due and queue.remove(due, self.run_id):
                changed = True
                removed_now |= due in (self._now, stale_now)
        if removed_now and not record.status.is_terminal and self._has_inbox():
            queue.add(self._now, self.run_id)  # a post raced with us: stay due (``_reconcile``)
            queue.sync()
        if record.status.is_terminal and self._lane is not None:
            # After the record: a crash in between leaves an entry the next reader removes.
            store.lanes.leave(self._lane, self.run_id)
            changed = True
        elif self._status.is_terminal and self._lane is not None and not self._rejoined:
            # An ended run saved unfinished again without writing a retry's event (which
            # re-enters the lane before it is written, see ``_reopen``): a driver repairing a
            # record that a crash kept from being saved after the event keeps the place the
            # event's writer took; anything else goes to the back of the lane.
            store.lanes.join(
                self._lane, self.run_id, store.sequence.take, attempt=record.attempt, keep=True
            )
            changed = True
        self._rejoined = False
        self._status = record.status
        if changed:
            store.hub.touch("")
        self._due = new_due
        store.hub.touch(self.run_id)

    def _has_inbox(self) -> bool:
        inbox = os.path.join(self._dir, INBOX_DIR)
        return any(n.endswith(".json") for n in _fsops.listdir(inbox) if n[0] != ".")

    def _reconcile(
        self, record: RunRecord, listed: str | None = None, entered: bool | None = None
    ) -> None:
        """Make the queue and index entries agree with the record (after a crash, a race).
        ``entered``: whether the run's index entry is there under the record's status, if the
        caller has just looked (the lock held since).

        Queue entries seen by this process's last ``due_runs`` are known by name; others can
        only be the run's due-now entry (``_now``: a pending or running run's, and a post's
        mark), an untagged one an older wf's post left, or the one its record implies. A post
        writes its message *before* its due-now entry, and we check the inbox *after* removing
        that entry, so between us a message never ends up without its run being due.
        """
        queue = self._store.queue
        expected = {self._due} if self._due is not None else set()
        keep = {queue_name(due, self.run_id) for due in expected}
        now_name = queue_name(self._now, self.run_id)
        if now_name not in keep and not record.status.is_terminal and self._has_inbox():
            # Kept for a message in the inbox. (A pending or running run keeps it anyway: it
            # is the entry its record implies, so its inbox is not looked at for it.)
            keep.add(now_name)
        known = queue.known_names(self.run_id) | {now_name, queue_name(NOW, self.run_id)}
        changed = removed_now = False
        for name in known - keep:
            if queue.remove_name(name):
                changed = True
                removed_now |= name == now_name
        for due in expected:
            if queue_name(due, self.run_id) != listed:  # seen under the lock: it is there
                changed |= queue.add(due, self.run_id)
        if removed_now and not record.status.is_terminal and self._has_inbox():
            changed |= queue.add(self._now, self.run_id)
        if changed:
            queue.sync()
        self._store.index.set(self._seq, self.run_id, self._index, self._index, there=entered)

    # -- inbox ----------------------------------------------------------------------------

    async def ack_inbox(self, message_ids: Sequence[str]) -> None:
        """Remove handled messages (durably)."""
        self._check()
        inbox = os.path.join(self._dir, INBOX_DIR)
        removed = False
        for message_id in message_ids:
            if not _MESSAGE_ID.match(message_id):
                raise UsageError(f"invalid inbox message id {message_id!r}")
            removed |= _fsops.unlink(os.path.join(inbox, f"{message_id}.json"))
        if removed:
            _fsops.fsync_dir(inbox)

    # -- streams --------------------------------------------------------------------------

    def _stream(self, stream: str) -> StreamWriter:
        writer = self._streams.get(stream)
        if writer is None:
            writer = self._streams[stream] = StreamWriter(self._dir, stream)
        return writer

    async def write_chunk(self, stream: str, index: int, data: bytes) -> None:
        """Append chunk ``index`` durably; a chunk already written is not written again."""
        self._check()
        writer = self._stream(stream)
        if index != writer.count:
            return  # already written (a replay), or out of order: like the reference store
        writer.write(bytes(data))
        committer = self._committer
        committer.mark(writer.data_fd, writer.data_path, self._device, self._since)
        await self._commit(writer.idx_fd, writer.idx_path)
        self._store.hub.touch(self.run_id)

    async def close_stream(self, stream: str, chunks: int) -> None:
        """Mark the stream finished."""
        self._check()
        self._stream(stream).close(self._dir, chunks)
        self._store.hub.touch(self.run_id)

    # -- step logs ------------------------------------------------------------------------

    async def append_logs(self, entries: Sequence[LogEntry]) -> None:
        """Append step log entries (no fsync: logs are not the run's truth)."""
        self._check()
        if entries:
            _logs.append(self._dir, entries)
            self._store.hub.touch(self.run_id)

    # -- release --------------------------------------------------------------------------

    async def release(self) -> None:
        """Flush what ``append_soon`` wrote, close everything and drop the lock. Idempotent."""
        if self._released:
            return
        self._released = True
        committer = self._committer
        fds = [(self._fd, self._journal)]
        for writer in self._streams.values():
            fds += [(writer.data_fd, writer.data_path), (writer.idx_fd, writer.idx_path)]
        try:
            for fd, path in fds:
                if committer.is_dirty(fd) and self._broken is None:
                    await self._commit(fd, path)
        finally:
            self._close(fds)

    def abandon(self) -> None:
        """Close a lease that has written nothing and drop the lock (a creation's lease, taken
        while its flush ran, when that flush failed or was cancelled). Idempotent."""
        if not self._released:
            self._released = True
            self._close([(self._fd, self._journal)])

    def _close(self, fds: list[tuple[int, str]]) -> None:
        committer = self._committer
        for fd, _ in fds:
            committer.forget(fd)
        for writer in self._streams.values():
            writer.release()
        _forks.let_go(self)
        _fsops.close(self._fd)  # closing the last descriptor drops the flock
        if self._lock_fd is not None:
            _fsops.close(self._lock_fd)
        self._store.hub.held.pop(self.run_id, None)  # free: claims here may take it
        self._store.hub.touch(self.run_id)


def _due_now(due: str | None) -> bool:
    """Whether an entry with this due field is due at once (whatever its tags)."""
    return due is not None and due[:14] == NOW
