"""A store that keeps everything in memory: for tests, and the reference for store semantics.

It implements the whole ``Store`` contract within one process (leases are per-store objects, so
two engines sharing one ``MemoryStore`` still never drive one run at once).

Everything it keeps passes through JSON on the way in and on the way out, as in the durable
stores: a value only the memory store could hold (a set, an object, a lone surrogate) fails in
tests as it would fail on disk, and no caller can alias what the store holds.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import itertools
import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import orjson

from wf._exceptions import RunNotFound
from wf.store._base import (
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
    batch,
    lane_of,
    pin_allowed,
    stamp_seq,
)
from wf.store._decode import journal_problems
from wf.store._inboxes import InboxWatchers


def _through_json(value: Any) -> Any:
    """``value`` encoded and decoded again: what a durable store would give back."""
    return orjson.loads(orjson.dumps(value))


def _record(record: RunRecord) -> RunRecord:
    return RunRecord.from_json(_through_json(record.to_json()))


def _hook(hook: HookRecord) -> HookRecord:
    return HookRecord(**_through_json(dataclasses.asdict(hook)))


def _schedule(schedule: Schedule) -> Schedule:
    return Schedule.from_json(_through_json(schedule.to_json()))


def _message(message: InboxMessage) -> InboxMessage:
    return InboxMessage(message.id, message.kind, _through_json(message.data))


class _Stream:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.closed = False


class _Run:
    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.journal: list[Event] = []
        self.inbox: dict[str, InboxMessage] = {}
        self.streams: dict[str, _Stream] = {}
        self.logs: list[LogEntry] = []
        self.leased = False
        self.changed = asyncio.Event()
        self.lane = 0


class MemoryStore(Store):
    """Runs, journals, inboxes, hooks and streams in dictionaries. Not durable, by design."""

    claims_lane_heads = True
    filters_deployments = True

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._queue: dict[str, float] = {}
        self._hooks: dict[str, HookRecord] = {}
        self._activity = asyncio.Event()
        self._activity_count = 0
        """Changes announced so far (``_announce``)."""
        self._schedule_changes = 0
        self._seen_activity: int | None = None
        """``_activity_count`` at the last claim, or what the last wait reported: a change
        announced after it ends the next wait at once, however soon it came."""
        self._message_ids = itertools.count(1)
        self._sequence = itertools.count(1)
        """The store-wide creation sequence (``RunRecord.seq``); a retry's new place in its
        lane is drawn from it too."""
        self._slots: dict[str, set[int]] = {}
        self._rates: dict[str, list[float]] = {}
        self._schedules: dict[str, Schedule] = {}
        self._schedule_locks: dict[str, asyncio.Lock] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._deliveries: dict[str, bytes] = {}
        """Webhook deliveries kept by id (``save_delivery``), as JSON: nobody shares them."""
        self._counts: dict[str, int] = {status.value: 0 for status in RunStatus}
        """Runs by status, kept as runs change (``store_info`` reads it)."""
        self._inbox_watchers = InboxWatchers()

    # -- internals ------------------------------------------------------------------------

    def _run(self, run_id: str) -> _Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFound(run_id) from None

    def _touch(self, run: _Run) -> None:
        run.changed.set()
        run.changed = asyncio.Event()
        self._announce()

    def _announce(self) -> None:
        self._activity_count += 1
        self._activity.set()
        # A new event for the next waiters: one left set would end every later wait at once
        # (a worker waiting for a timer would spin until it came).
        self._activity = asyncio.Event()

    def _requeue(self, record: RunRecord) -> None:
        if record.status.is_terminal:
            self._queue.pop(record.id, None)
        elif record.status is RunStatus.SUSPENDED:
            self._queue[record.id] = math.inf if record.wake_at is None else record.wake_at
        elif record.status is RunStatus.PENDING and record.wake_at is not None:
            self._queue[record.id] = record.wake_at  # a delayed start, or a retry's backoff
        else:
            self._queue[record.id] = 0.0

    # -- runs -----------------------------------------------------------------------------

    async def create_run(
        self, record: RunRecord, events: Sequence[Event] = (), *, explicit: bool = False
    ) -> bool:
        if record.id in self._runs or (explicit and record.id in self._tombstones):
            return False
        seq = next(self._sequence)
        events = stamp_seq(record, events, seq)
        run = _Run(_record(record))
        run.lane = seq
        run.journal.extend(_through_json(events))
        self._runs[record.id] = run
        self._counts[record.status.value] += 1
        self._requeue(record)
        self._touch(run)
        return True

    async def get_run(self, run_id: str) -> RunRecord:
        return _record(self._run(run_id).record)

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
        wanted = set(statuses) if statuses else None
        out: list[RunRecord] = []
        below = None if before is None else self._seq_of(before)
        if below == 0:
            return out  # no such run ever existed: nothing was created before it
        # ``_runs`` holds runs in the order they were created (deletions keep it).
        for run in reversed(self._runs.values()):
            record = run.record
            if below is not None and record.seq >= below:
                continue
            if wanted is not None and record.status not in wanted:
                continue
            if workflow is not None and record.workflow != workflow:
                continue
            if parent_id is not None and record.parent_id != parent_id:
                continue
            if queue is not None and record.queue != queue:
                continue
            if group is not None and record.group != group:
                continue
            if deployment is not None and record.deployment != deployment:
                continue
            out.append(_record(record))
            if len(out) >= limit:
                break
        return out

    async def workflow_names(self) -> list[str] | None:
        return sorted({run.record.workflow for run in self._runs.values()})

    def _seq_of(self, run_id: str) -> int:
        """The creation number of a run, or of a deleted run by its tombstone; 0 if unknown."""
        run = self._runs.get(run_id)
        if run is not None:
            return run.record.seq
        tombstone = self._tombstones.get(run_id)
        return 0 if tombstone is None else tombstone.seq

    async def read_journal(self, run_id: str, start: int = 0) -> list[Event]:
        return list(_through_json(self._run(run_id).journal[max(0, start) :]))

    async def try_acquire(self, run_id: str) -> Lease | None:
        run = self._run(run_id)
        if run.leased:
            return None
        run.leased = True
        return _MemoryLease(self, run)

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
        """``Store.claim``, leaving out (and naming in ``waiting``) runs that wait in their
        group's lane, as the local store does."""
        leases: list[Lease] = []
        if limit <= 0:
            return leases
        self._seen_activity = self._activity_count  # what this look at the queue takes in
        lanes: dict[str, list[int]] = {}
        for run in self._runs.values():
            lane = lane_of(run.record)
            if lane is not None and not run.record.status.is_terminal:
                lanes.setdefault(lane, []).append(run.lane)
        for places in lanes.values():
            places.sort()
        due = await self.due_runs(now, len(self._queue), queues, deployments)
        for run_id in due:
            if len(leases) >= limit:
                break
            if run_id in exclude:
                continue
            run = self._runs[run_id]
            lane = lane_of(run.record)
            if lane is not None:
                width = int((run.record.limits or {}).get("group_concurrency", 1))
                if bisect.bisect_left(lanes[lane], run.lane) >= width:
                    if waiting is not None:
                        waiting.add(run_id)
                    continue
            lease = await self.try_acquire(run_id)
            if lease is not None:
                leases.append(lease)
            elif held is not None:
                held.add(run_id)
        return leases

    # -- inbox and queue ------------------------------------------------------------------

    async def post(self, run_id: str, kind: str, data: dict[str, Any]) -> str:
        run = self._run(run_id)
        message_id = f"m{next(self._message_ids):012d}"
        run.inbox[message_id] = InboxMessage(message_id, kind, _through_json(data))
        if not run.record.status.is_terminal:
            self._queue[run_id] = 0.0
        self._touch(run)
        self._inbox_watchers.heard(run_id)
        return message_id

    async def read_inbox(self, run_id: str) -> list[InboxMessage]:
        run = self._run(run_id)
        return [_message(run.inbox[k]) for k in sorted(run.inbox)]

    async def cancels_waiting(self, run_ids: Collection[str]) -> set[str]:
        found = set()
        for run_id in run_ids:
            run = self._runs.get(run_id)
            if run is not None and any(m.kind == "cancel" for m in run.inbox.values()):
                found.add(run_id)
        return found

    async def due_runs(
        self,
        now: float,
        limit: int = 100,
        queues: Sequence[str] | None = None,
        deployments: Pins | None = None,
    ) -> list[str]:
        wanted = None if queues is None else set(queues)
        due = []
        for run_id, at in self._queue.items():
            if at > now:
                continue
            record = self._runs[run_id].record
            if wanted is not None and record.queue not in wanted:
                continue
            if not pin_allowed(record.deployment, deployments):
                continue
            due.append((-record.priority, at, record.seq, run_id))
        due.sort()
        return [found[-1] for found in due[:limit]]

    # -- lanes, slots, rates ---------------------------------------------------------------

    async def lane_ahead(self, lane: str, run_id: str, limit: int) -> list[str]:
        mine = self._run(run_id).lane
        ahead = sorted(
            (run.lane, rid)
            for rid, run in self._runs.items()
            if run.lane < mine and not run.record.status.is_terminal and lane_of(run.record) == lane
        )
        return [rid for _, rid in ahead[:limit]]

    async def try_slot(self, name: str, capacity: int) -> Slot | None:
        taken = self._slots.setdefault(name, set())
        for index in range(capacity):
            if index not in taken:
                taken.add(index)
                return _MemorySlot(self, name, index)
        return None

    async def slots_taken(self, name: str, capacity: int) -> int:
        return len([i for i in self._slots.get(name, ()) if i < capacity])

    async def try_rate(self, name: str, n: int, window: float, now: float) -> float | None:
        starts = [t for t in self._rates.get(name, []) if t > now - window]
        if len(starts) >= n:
            self._rates[name] = starts
            return min(starts) + window
        starts.append(now)
        self._rates[name] = starts
        return None

    async def rate_retry_at(self, name: str, n: int, window: float, now: float) -> float | None:
        starts = [t for t in self._rates.get(name, []) if t > now - window]
        return min(starts) + window if len(starts) >= n else None

    async def next_due_at(
        self, after: float | None = None, queues: Sequence[str] | None = None
    ) -> float | None:
        floor = -math.inf if after is None else after
        finite = [
            t
            for run_id, t in self._queue.items()
            if floor < t != math.inf
            and (queues is None or self._runs[run_id].record.queue in queues)
        ]
        return min(finite) if finite else None

    async def wait_for_activity(self, timeout: float) -> None:
        """Until a change announced since the last claim (or the last wait's return), or
        timeout: a change between a claim and the wait that follows it is not missed."""
        seen = self._seen_activity
        if seen is None or seen == self._activity_count:
            event = self._activity
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await event.wait()
        self._seen_activity = self._activity_count  # reported by this wait

    def watch_inbox(self, run_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Called back on each post to the run."""
        return self._inbox_watchers.add(run_id, callback)

    async def wait_for_run(self, run_id: str, timeout: float) -> None:
        event = self._run(run_id).changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    # -- hooks ----------------------------------------------------------------------------

    async def register_hook(self, hook: HookRecord) -> str | None:
        owner = self._hooks.get(hook.token)
        if owner is not None and owner.run_id != hook.run_id:
            return owner.run_id
        self._hooks[hook.token] = _hook(hook)
        self._announce()
        return None

    async def get_hook(self, token: str) -> HookRecord | None:
        hook = self._hooks.get(token)
        return None if hook is None else _hook(hook)

    async def release_hook(self, token: str, run_id: str) -> None:
        owner = self._hooks.get(token)
        if owner is not None and owner.run_id == run_id:
            del self._hooks[token]

    async def list_hooks(self, run_id: str | None = None) -> list[HookRecord]:
        return [_hook(h) for h in self._hooks.values() if run_id is None or h.run_id == run_id]

    async def save_delivery(self, delivery: WebhookDelivery) -> None:
        self._deliveries.setdefault(delivery.id, orjson.dumps(delivery.to_json()))

    async def post_once(
        self, run_id: str, kind: str, data: dict[str, Any], delivery: WebhookDelivery
    ) -> WebhookDelivery | None:
        """Check, post and keep with no ``await`` between them: one step on the loop."""
        kept = self._deliveries.get(delivery.id)
        if kept is not None:
            return WebhookDelivery.from_json(orjson.loads(kept))
        self._run(run_id)  # an unknown run: RunNotFound, and nothing kept
        await self.post(run_id, kind, data)
        self._deliveries[delivery.id] = orjson.dumps(delivery.to_json())
        return None

    async def get_deliveries(self, delivery_ids: Sequence[str]) -> dict[str, WebhookDelivery]:
        found = ((key, self._deliveries.get(key)) for key in delivery_ids)
        return {key: WebhookDelivery.from_json(orjson.loads(raw)) for key, raw in found if raw}

    async def prune_deliveries(self, before: float) -> int:
        old = [
            key
            for key, raw in self._deliveries.items()
            if WebhookDelivery.from_json(orjson.loads(raw)).at < before
        ]
        for key in old:
            del self._deliveries[key]
        return len(old)

    # -- streams --------------------------------------------------------------------------

    async def read_chunks(
        self, run_id: str, stream: str, start: int = 0, *, max_bytes: int | None = None
    ) -> tuple[list[bytes], bool]:
        found = self._run(run_id).streams.get(stream)
        if found is None:
            return [], False
        return batch(found.chunks[start:], max_bytes), found.closed

    async def list_streams(self, run_id: str) -> dict[str, tuple[int, bool]]:
        streams = self._run(run_id).streams
        return {name: (len(s.chunks), s.closed) for name, s in streams.items()}

    # -- step logs ------------------------------------------------------------------------

    async def read_logs(self, run_id: str, start: int = 0) -> list[LogEntry]:
        entries: list[LogEntry] = _through_json(self._run(run_id).logs[max(0, start) :])
        return entries

    # -- schedules and retention (#16) ---------------------------------------------------

    async def lock_schedule(self, schedule_id: str, *, wait: bool = True) -> ScheduleLock | None:
        lock = self._schedule_locks.setdefault(schedule_id, asyncio.Lock())
        if lock.locked() and not wait:
            return None
        await lock.acquire()
        return _MemoryScheduleLock(lock)

    async def save_schedule(self, schedule: Schedule) -> None:
        self._schedules[schedule.id] = _schedule(schedule)
        self._schedule_changes += 1
        self._announce()

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        found = self._schedules.get(schedule_id)
        return _schedule(found) if found is not None else None

    async def delete_schedule(self, schedule_id: str) -> bool:
        if self._schedules.pop(schedule_id, None) is None:
            return False
        self._schedule_changes += 1
        self._announce()
        return True

    def schedule_changes(self) -> int:
        return self._schedule_changes

    async def list_schedules(self) -> list[Schedule]:
        return [_schedule(self._schedules[k]) for k in sorted(self._schedules)]

    async def delete_runs(self, run_ids: Sequence[str], *, now: float, reason: str) -> Deleted:
        out = Deleted()
        for run_id in run_ids:
            run = self._runs.get(run_id)
            if run is None or run.leased or not run.record.status.is_terminal:
                continue
            del self._runs[run_id]
            self._counts[run.record.status.value] -= 1
            self._queue.pop(run_id, None)
            for token in [t for t, h in self._hooks.items() if h.run_id == run_id]:
                del self._hooks[token]
            record = run.record
            self._tombstones[run_id] = Tombstone(
                run_id, record.workflow, record.status.value, now, reason, record.seq
            )
            out.ids.append(run_id)
            out.bytes += len(repr(record.to_json())) + len(repr(run.journal))
            out.bytes += sum(len(c) for s in run.streams.values() for c in s.chunks)
            run.changed.set()
        return out

    async def prune_tombstones(self, before: float) -> int:
        old = [k for k, stone in self._tombstones.items() if stone.deleted_at < before]
        for run_id in old:
            del self._tombstones[run_id]
        return len(old)

    async def get_tombstone(self, run_id: str) -> Tombstone | None:
        return self._tombstones.get(run_id)

    async def store_info(self) -> StoreStats:
        return StoreStats(
            kind="memory",
            location="memory",
            format=None,
            runs=dict(self._counts),
            schedules=len(self._schedules),
            tombstones=len(self._tombstones),
            size_bytes=None,
        )

    async def verify(self, *, on_progress: Progress | None = None) -> list[str]:
        problems = []
        counted = {status.value: 0 for status in RunStatus}
        for run in self._runs.values():
            counted[run.record.status.value] += 1
        for status, found in counted.items():
            if self._counts[status] != found:
                problems.append(
                    f"the count of {status} was {self._counts[status]}, a scan found {found}: "
                    "repaired"
                )
        self._counts = counted
        for run_id, run in sorted(self._runs.items()):
            if run.journal and run.journal[0].get("type") != "run_started":
                problems.append(f"run {run_id}: the journal does not start with run_started")
            problems += journal_problems(f"run {run_id}: journal", run.journal)
        return problems


class _MemoryScheduleLock(ScheduleLock):
    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock: asyncio.Lock | None = lock

    async def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


class _MemorySlot(Slot):
    def __init__(self, store: MemoryStore, name: str, index: int) -> None:
        self._store, self._name, self._index = store, name, index
        self._released = False

    async def release(self) -> None:
        if not self._released:
            self._released = True
            self._store._slots[self._name].discard(self._index)
            self._store._announce()


class _MemoryLease(Lease):
    soon_outlives_process = True  # in the journal at once, as long as the store lives

    def __init__(self, store: MemoryStore, run: _Run) -> None:
        self._store = store
        self._run = run
        self.run_id = run.record.id
        self._released = False

    async def append(self, events: Sequence[Event]) -> None:
        self.append_soon(events)

    def append_soon(self, events: Sequence[Event]) -> None:
        self._run.journal.extend(_through_json(list(events)))
        self._store._touch(self._run)

    def append_pending(self, events: Sequence[Event]) -> bool:
        self.append_soon(events)  # as durable as anything here: settling has nothing to do
        return True

    async def save(self, record: RunRecord) -> None:
        if self._run.record.status.is_terminal and not record.status.is_terminal:
            self._run.lane = next(self._store._sequence)  # ``wf retry``: the back of its lane
        record.seq = self._run.record.seq  # given at creation, never changed
        self._store._counts[self._run.record.status.value] -= 1
        self._store._counts[record.status.value] += 1
        self._run.record = _record(record)
        self._store._requeue(record)
        self._store._touch(self._run)

    async def ack_inbox(self, message_ids: Sequence[str]) -> None:
        for message_id in message_ids:
            self._run.inbox.pop(message_id, None)

    async def write_chunk(self, stream: str, index: int, data: bytes) -> None:
        found = self._run.streams.setdefault(stream, _Stream())
        if index == len(found.chunks):
            found.chunks.append(bytes(data))
        self._store._touch(self._run)

    async def close_stream(self, stream: str, chunks: int) -> None:
        self._run.streams.setdefault(stream, _Stream()).closed = True
        self._store._touch(self._run)

    async def append_logs(self, entries: Sequence[LogEntry]) -> None:
        self._run.logs.extend(_through_json(list(entries)))
        self._store._touch(self._run)

    async def release(self) -> None:
        if not self._released:
            self._released = True
            self._run.leased = False
            self._store._touch(self._run)
