"""A run's lease: the journal writer, record saves and stream writes of its one driver.

Fencing: taking a lease bumps the run's ``lease_epoch`` (after ``SELECT ... FOR UPDATE``), and
every journal append and record save of the lease checks that the epoch is still its own, in
the same statement, under the run's row lock (see ``_writes``). A driver whose advisory lock
vanished with its connection, and whose run was then taken over, gets ``StoreError`` instead of
interleaving its events with the new driver's. Inbox acknowledgements and stream chunks are
idempotent and need no fence.

Appends of one lease go through one writer task, in order: appends that arrive while a write is
in flight are sent together in the next write, so ``asyncio.gather`` of steps shares a commit;
and the writes of all the leases of a store instance go out in batches (``_writes``), so the
steps of concurrent runs share statements and commits too. ``append_soon`` events wait
``SOON`` seconds for a following ``append`` to carry them (a fast step costs one commit, not
two); if none comes they are written with ``synchronous_commit`` off — visible to readers at
once, durable with the next commit, as the contract allows. ``append_pending`` events (a
step's completion) wait the same way, at most ``PENDING`` seconds, for the write that carries
them: the outcome's, for a run's last step, so that step costs no commit of its own; whatever
write takes them is a durable one, and ``settle`` waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from wf._exceptions import LeaseLost, StoreCorrupted, StoreError, UsageError
from wf.store._base import (
    Event,
    InboxMessage,
    Lease,
    LogEntry,
    RunRecord,
    RunStatus,
    Store,
    lane_of,
)
from wf.store._decode import is_log_entry
from wf.store.postgres._conn import encode, json_param, refused_value, refused_write
from wf.store.postgres._schema import lock_key
from wf.store.postgres._signals import QUEUE, RUN
from wf.store.postgres._writes import APPEND_SAVE, WITH_SEQ

if TYPE_CHECKING:
    from wf.store.postgres._session import Session

log = logging.getLogger("wf.store.postgres")

SOON = 0.05
"""Seconds ``append_soon`` events wait for an ``append`` to carry them."""

PENDING = 0.002
"""Seconds ``append_pending`` events wait for a write to carry them before one is made for them
alone: long enough for a run's outcome to follow its last step, short enough that a process
that dies in between seldom leaves a finished step unrecorded (it runs again, as any step whose
completion a crash kept from its journal does)."""

_APPEND_LOGS = """
INSERT INTO wf_logs (run_id, entry, checked)
SELECT %s, e.entry, %s FROM json_array_elements(%s) WITH ORDINALITY AS e(entry, n) ORDER BY e.n
"""
"""A batch of step log entries, ``checked`` (true, or NULL: readers check them) as
``_checked`` found them (see ``_schema._LOGS_CHECKED``)."""


def _checked(entries: Sequence[LogEntry]) -> bool | None:
    """True if every entry is one as readers take it, read back (a NaN or infinite time comes
    back null). Called once the batch is encoded: an int beyond 64 bits was refused there."""
    for entry in entries:
        if not is_log_entry(entry):
            return None
        ts = entry["ts"]
        if type(ts) is not int and not math.isfinite(ts):
            return None
    return True


_SAVE = (
    """
UPDATE wf_runs SET workflow = %(workflow)s, status = %(status)s, parent_id = %(parent)s,
       due_at = %(due)s, deployment = %(deployment)s, record = """
    + WITH_SEQ.format(record="%(record)s", seq="seq")
    + """
WHERE id = %(run)s AND lease_epoch = %(epoch)s
"""
)

# ``wf retry`` queues an ended run again: it re-enters its group's lane at the back. Under the
# lane's lock, as a creation does, so a later lane number is never visible before an earlier one.
_REJOIN_LANE = """
UPDATE wf_runs SET lane = nextval('wf_lane_seq')
WHERE id = %(run)s AND lease_epoch = %(epoch)s AND lane_name IS NOT NULL
  AND status IN ('completed', 'failed', 'cancelled')
"""

# A message posted after the save's snapshot was taken is seen by this second statement (or its
# post's own update waits for our row lock and runs after): a suspending run never sleeps
# through a message.
_DUE_IF_INBOX = """
UPDATE wf_runs SET due_at = 0
WHERE id = %(run)s AND due_at IS NOT NULL AND due_at > 0
  AND EXISTS (SELECT FROM wf_inbox WHERE run_id = %(run)s)
"""


def record_json(record: RunRecord) -> dict[str, Any]:
    """The record's JSON as written: without ``seq``, which the statement puts in from the row
    (``WITH_SEQ``), so no save ever moves a run in the creation sequence."""
    data = record.to_json()
    del data["seq"]
    return data


def due_at(record: RunRecord) -> float | None:
    """The run's queue position: None when finished, 0 now, its wake time, or infinity."""
    if record.status.is_terminal:
        return None
    if record.status is RunStatus.SUSPENDED:
        return math.inf if record.wake_at is None else float(record.wake_at)
    if record.status is RunStatus.PENDING and record.wake_at is not None:
        return float(record.wake_at)  # a delayed start, or a retry's backoff
    return 0.0


class PostgresLease(Lease):
    """Exclusive right to drive one run, held as an advisory lock plus a fencing epoch."""

    def __init__(
        self,
        session: Session,
        run_id: str,
        epoch: int,
        generation: int,
        read: tuple[dict[str, Any], list[Event], list[InboxMessage]] | None = None,
    ) -> None:
        """``read``: the run's record, journal and inbox as a claim read them right after
        taking the lease (``PostgresStore.claim``): the first ``read_run`` and ``read_inbox``
        answer from them instead of asking again."""
        self.run_id = run_id
        self._read = read
        self._inbox = read[2] if read is not None else None
        self._session = session
        self._epoch = epoch
        self._generation = generation
        self._released = False
        self._pending: list[Event] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._visible: list[asyncio.Future[None]] = []
        """Writers waiting for their events to be written, not flushed (``append_visible``)."""
        self._writer: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._save_next: RunRecord | None = None
        """A record to save with the next journal write (``save_soon``, ``append_and_save``)."""
        self._finished = False
        """The last record saved was terminal."""
        self._carrying: asyncio.Future[None] | None = None
        """Set while a write carrying a record is in flight: a ``save`` waits for it."""
        self._owed = 0
        """``append_pending`` calls so far; ``_paid`` of them a durable commit has covered."""
        self._paid = 0
        self._broken: StoreError | None = None
        """Why a write of ``append_pending`` events failed: every later write fails with it."""

    def _check(self) -> None:
        if self._released:
            raise StoreError(f"lease on run {self.run_id} was released")
        if self._broken is not None:
            raise self._broken

    def on_lost(self, callback: Callable[[StoreError], None]) -> None:
        """Call ``callback`` as soon as this process's lock connection is found lost (the
        watchdog pings it while leases are held): another process may take the run over."""
        if self._released:
            return
        self._session.locks.watch(
            self.run_id, self._generation, lambda: callback(self._lost_lock())
        )

    def _lost_lock(self) -> LeaseLost:
        return LeaseLost(
            f"lease on run {self.run_id} was lost: this process's lock connection to "
            "PostgreSQL was dropped, so another driver may take the run over; this one stops"
        )

    def _lost(self) -> LeaseLost:
        return LeaseLost(
            f"lease on run {self.run_id} was lost: another driver took the run over "
            "(this process's lock connection to PostgreSQL had dropped); nothing was written"
        )

    async def read_run(self, store: Store) -> tuple[RunRecord, list[Event]]:
        """The record and journal the claim read (once), else read them now."""
        read, self._read = self._read, None
        if read is not None:
            # Parsed here, not by the claim: a damaged record fails its own driver only.
            return RunRecord.from_json(read[0], self.run_id), read[1]
        return await store.get_run(self.run_id), await store.read_journal(self.run_id)

    async def read_inbox(self, store: Store) -> list[InboxMessage]:
        """The inbox the claim read (once), else read it now; now too when a post to the
        run may have come since the claim's read (its driver, which watches the inbox from
        this read on, would hear of it only at its first poll)."""
        inbox, self._inbox = self._inbox, None
        if inbox is not None and not self._session.signals.claim_read_stale(self.run_id):
            return inbox
        return await store.read_inbox(self.run_id)

    # -- journal --------------------------------------------------------------------------

    async def append(self, events: Sequence[Event]) -> None:
        self._check()
        await self._flush(events)

    async def append_visible(self, events: Sequence[Event]) -> None:
        """Written at once, committed with ``synchronous_commit`` off: the server has them
        (they outlive this process) without a wait for its WAL flush; a durable commit after
        it flushes them too (the WAL is written in order)."""
        self._check()
        self._pending.extend(events)
        waiter = asyncio.get_running_loop().create_future()
        self._visible.append(waiter)
        self._kick()
        await waiter

    def append_soon(self, events: Sequence[Event]) -> None:
        self._check()
        self._pending.extend(events)
        if self._timer is None and (self._writer is None or self._writer.done()):
            self._timer = asyncio.get_running_loop().call_later(SOON, self._kick)

    def append_pending(self, events: Sequence[Event]) -> bool:
        """Held for the next write, which makes them durable (at the latest ``PENDING``
        seconds on): a failure of that write fails every later write of the lease."""
        self._check()
        self._pending.extend(events)
        self._owed += 1
        if self._timer is None and (self._writer is None or self._writer.done()):
            self._timer = asyncio.get_running_loop().call_later(PENDING, self._kick)
        return True

    async def settle(self) -> None:
        """Return once the ``append_pending`` events are committed durably."""
        if self._paid == self._owed:
            return
        self._check()
        await self._flush(())

    async def _flush(self, events: Sequence[Event]) -> None:
        self._pending.extend(events)
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._kick()
        await waiter

    def _kick(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_all())

    async def _write_all(self) -> None:
        # Runs while someone awaits an append; append_soon events alone are written once, when
        # their timer fires (a run with steps in flight keeps sharing commits meanwhile).
        first = True
        while (
            self._waiters
            or self._visible
            or (first and (self._pending or self._save_next is not None))
        ):
            first = False
            batch, self._pending = self._pending, []
            durable, self._waiters = self._waiters, []
            waiters = durable + self._visible
            self._visible = []
            save, self._save_next = self._save_next, None
            owed = self._owed  # every append_pending event so far is in this batch or written
            try:
                if self._broken is not None:
                    raise self._broken
                await self._insert(batch, durable=bool(durable) or owed > self._paid, save=save)
            except asyncio.CancelledError:
                for waiter in waiters:
                    waiter.cancel()
                raise
            except Exception as error:
                if owed > self._paid and self._broken is None:
                    # Pending events that nobody awaited are lost with this write: nothing
                    # more may be written after them, as if they had been.
                    self._broken = (
                        error if isinstance(error, StoreError) else StoreError(str(error))
                    )
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(error)
                if not waiters and self._broken is None:
                    # only append_soon events: harmless to lose, by contract
                    log.warning("run %s: could not write events: %s", self.run_id, error)
            else:
                self._paid = max(self._paid, owed)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
        pending = self._pending or self._save_next is not None
        if pending and self._timer is None and not self._released:
            wait = PENDING if self._owed > self._paid else SOON
            self._timer = asyncio.get_running_loop().call_later(wait, self._kick)

    async def _insert(
        self, events: list[Event], *, durable: bool, save: RunRecord | None = None
    ) -> None:
        if save is not None:
            carrying = self._carrying = asyncio.get_running_loop().create_future()
            try:
                if events:
                    await self._insert_and_save(events, save, durable=durable)
                else:
                    await self._save_row(save)
            finally:
                if not carrying.done():
                    carrying.set_result(None)
                if self._carrying is carrying:
                    self._carrying = None
            return
        if not events:
            return
        written = await self._session.writes.write(
            self.run_id, self._epoch, encode(events), durable=durable
        )
        if not written.fenced or written.appended != len(events):
            raise self._lost()
        self._session.signals.changed(RUN, self.run_id)

    async def _insert_and_save(
        self, events: list[Event], record: RunRecord, *, durable: bool
    ) -> None:
        lane = lane_of(record)
        if record.status is RunStatus.PENDING and lane is not None:
            with self._own_values():
                await self._retry_in_lane(events, record, lane)
            return
        # The record is saved only if the epoch held: one statement, one commit (shared
        # with other leases' writes, see ``_writes``).
        save = (
            record.workflow,
            record.status.value,
            record.parent_id,
            due_at(record),
            encode(record_json(record)),
            record.deployment,
        )
        written = await self._session.writes.write(
            self.run_id, self._epoch, encode(events), save, durable=durable
        )
        if not (written.fenced and written.saved) or written.appended != len(events):
            raise self._lost()
        self._saved(record)

    async def _retry_in_lane(self, events: list[Event], record: RunRecord, lane: str) -> None:
        """A retry of an ended run (``wf retry``): its event, its pending record and its new
        place at the back of its lane commit together, under the lane's lock as a creation's
        place does (``_save_row``)."""
        params = {**self._record_params(record), "events": json_param(events)}
        async with (
            self._session.pool.connection("append to the journal") as conn,
            conn.transaction(),
        ):
            key = lock_key(self._session.schema, "lane:" + lane)
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            await conn.execute(_REJOIN_LANE, params)
            row = await (await conn.execute(APPEND_SAVE, params)).fetchone()
        if row is None or int(row[0]) != 1 or int(row[1]) != len(events):
            raise self._lost()
        self._saved(record)

    def _record_params(self, record: RunRecord) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "epoch": self._epoch,
            "workflow": record.workflow,
            "status": record.status.value,
            "parent": record.parent_id,
            "due": due_at(record),
            "record": json_param(record_json(record)),
            "deployment": record.deployment,
        }

    def _saved(self, record: RunRecord) -> None:
        # A run now running made nothing due and freed nothing, nor did one that ended outside
        # a group (its caps' places announce themselves, its parent hears through a post): its
        # watchers hear of it, the workers of every process need not wake for it (nor look at
        # the queue again). The end of a run in a group may let its lane's next run start.
        quiet = record.status is RunStatus.RUNNING or (
            record.status.is_terminal and record.group is None
        )
        kind = RUN if quiet else QUEUE
        self._session.signals.changed(kind, self.run_id)
        self._finished = record.status.is_terminal

    # -- record, inbox, streams -----------------------------------------------------------

    async def save(self, record: RunRecord) -> None:
        self._check()
        if record.id != self.run_id:
            raise UsageError(f"lease on run {self.run_id} cannot save run {record.id}")
        self._save_next = None  # replaced by this one
        if self._paid < self._owed:
            await self._flush(())  # the record never goes out ahead of the events it follows
        carrying = self._carrying
        if carrying is not None:
            # An older record is being written with a journal write: this one lands after it.
            await asyncio.shield(carrying)
        await self._save_row(record)

    @contextlib.contextmanager
    def _own_values(self) -> Iterator[None]:
        """A write that PostgreSQL refuses for a value of the run's own (a NUL in its
        workflow name) is the run's damage: ``StoreCorrupted``, which a worker notes once and
        leaves alone, not a store failure retried for good."""
        try:
            yield
        except StoreError as error:
            if isinstance(error, StoreCorrupted) or not refused_value(error):
                raise
            raise refused_write(self.run_id, error) from error

    async def _save_row(self, record: RunRecord) -> None:
        with self._own_values():
            await self._save_row_once(record)

    async def _save_row_once(self, record: RunRecord) -> None:
        params = self._record_params(record)
        async with self._session.pool.connection("save the run record") as conn:
            lane = lane_of(record)
            if record.status is RunStatus.PENDING and lane is not None:
                # Only a retry's save (from an ended run) moves the lane; others leave it.
                async with conn.transaction():
                    key = lock_key(self._session.schema, "lane:" + lane)
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", [key])
                    await conn.execute(_REJOIN_LANE, params)
                    cur = await conn.execute(_SAVE, params)
            elif record.status is RunStatus.SUSPENDED:
                async with conn.transaction():
                    cur = await conn.execute(_SAVE, params)
                    await conn.execute(_DUE_IF_INBOX, params)
            else:
                cur = await conn.execute(_SAVE, params)
        if cur.rowcount != 1:
            raise self._lost()
        self._saved(record)

    def save_soon(self, record: RunRecord) -> bool:
        """Carried by the next journal write (a step's, at the latest ``SOON`` seconds on)."""
        self._check()
        if record.id != self.run_id or record.status is not RunStatus.RUNNING:
            return False
        self._save_next = record
        if self._timer is None and (self._writer is None or self._writer.done()):
            self._timer = asyncio.get_running_loop().call_later(SOON, self._kick)
        return True

    async def append_and_save(self, events: Sequence[Event], record: RunRecord) -> None:
        """One statement, one commit: the events and the record together."""
        self._check()
        if record.id != self.run_id:
            raise UsageError(f"lease on run {self.run_id} cannot save run {record.id}")
        if record.status is RunStatus.SUSPENDED or not events:
            # A suspension's save also looks at the inbox (``_DUE_IF_INBOX``).
            await self.append(events)
            await self.save(record)
            return
        self._save_next = record
        await self._flush(events)

    async def ack_inbox(self, message_ids: Sequence[str]) -> None:
        self._check()
        numbers = []
        for message_id in message_ids:
            if not (
                message_id.startswith("m") and message_id.isascii() and message_id[1:].isdigit()
            ):
                raise UsageError(f"invalid inbox message id {message_id!r}")
            numbers.append(int(message_id[1:]))
        if not numbers:
            return
        async with self._session.pool.connection("acknowledge inbox messages") as conn:
            await conn.execute(
                "DELETE FROM wf_inbox WHERE run_id = %s AND id = ANY(%s)", [self.run_id, numbers]
            )

    async def write_chunk(self, stream: str, index: int, data: bytes) -> None:
        self._check()
        async with self._session.pool.connection("write a stream chunk") as conn:
            # A replayed step writes its chunks again: the first write of an index wins.
            await conn.execute(
                "INSERT INTO wf_stream_chunks (run_id, name, idx, data) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [self.run_id, stream, index, bytes(data)],
            )
        self._session.signals.changed(RUN, self.run_id)

    async def close_stream(self, stream: str, chunks: int) -> None:
        self._check()
        async with self._session.pool.connection("close a stream") as conn:
            await conn.execute(
                "INSERT INTO wf_stream_ends (run_id, name, chunks) VALUES (%s, %s, %s)"
                " ON CONFLICT (run_id, name) DO UPDATE SET chunks = EXCLUDED.chunks",
                [self.run_id, stream, chunks],
            )
        self._session.signals.changed(RUN, self.run_id)

    # -- step logs ------------------------------------------------------------------------

    async def append_logs(self, entries: Sequence[LogEntry]) -> None:
        self._check()
        if not entries:
            return
        batch = json_param(list(entries))  # first: a value that is not JSON is the error
        async with (
            self._session.pool.connection("write step logs") as conn,
            conn.transaction(),
        ):
            # Logs are not the run's truth: no need to wait for the commit's flush.
            await conn.execute("SET LOCAL synchronous_commit TO off")
            await conn.execute(_APPEND_LOGS, [self.run_id, _checked(entries), batch])
        self._session.signals.changed(RUN, self.run_id)

    # -- release --------------------------------------------------------------------------

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._session.locks.unwatch(self.run_id, self._generation)
        if self._inbox is not None:  # never taken: forget the claim's read
            self._session.signals.claim_read_stale(self.run_id)
        try:
            busy = self._writer is not None and not self._writer.done()
            if self._pending or self._save_next is not None or busy:
                await self._flush(())
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            with contextlib.suppress(StoreError):
                await self._session.locks.unlock(self.run_id, self._generation)
            if not self._finished:
                # Its lock is free: another process may take it now. A finished run's final
                # save said all there is to say (it left the queue).
                self._session.signals.changed(QUEUE, self.run_id)
