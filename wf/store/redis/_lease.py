"""A run's lease on Redis, and the keeper that keeps an instance's leases alive.

A lease is the key ``lease:<run id>``, set (with a time to live) to its token
``<epoch>:<call>:<holder>``: the run's fencing epoch, which taking the lease bumps, a random word
of the call that took it (so that call, sent again, takes it again), and the holder id of the
instance that took it (``_holder``). Every journal append and record save of the lease
is one script that first checks the key still holds its token: a driver whose lease expired
(its process stalled, or lost the server for longer than the lease's time to live) or whose
holder connection died, and whose run was then taken over, gets ``StoreError: lease ... was
lost`` instead of interleaving its events with the new driver's. Inbox acknowledgements, stream
chunks and step logs are idempotent or best effort, and unfenced (as on PostgreSQL).

While an instance holds leases (or slots, or schedule locks), its ``Keeper`` renews their keys
every third of their time to live in one script. A key found holding another token is lost
at once; a run's lease whose key lapsed while nobody took the run (the loop was blocked past
the time to live: the run's fencing epoch is still the lease's) is taken back, by the renewal
or the lease's next write (``fenced`` in ``_scripts``); when renewal has failed for a whole
time to live, every key is, and when the instance's holder connection drops, every lease taken
under its id is. Losing a lease
calls its ``on_lost`` callbacks, so the driver stops (cancels its async steps, writes nothing
more) before another worker takes the run over.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import RedisError

from wf._exceptions import LeaseLost, StoreError
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
from wf.store.redis import _scripts

if TYPE_CHECKING:
    from wf.store.redis._store import RedisStore

log = logging.getLogger("wf.store.redis")

SOON = 0.05
"""Seconds ``append_soon`` events wait for an ``append`` to carry them."""


def due_score(record: RunRecord) -> str:
    """The run's due time as a queue score: ``0`` now, its wake time, or ``+inf`` (a message
    wakes it). Terminal runs have none (the scripts leave them out of the queue)."""
    if record.status is RunStatus.SUSPENDED:
        return "+inf" if record.wake_at is None else repr(float(record.wake_at))
    if record.status is RunStatus.PENDING and record.wake_at is not None:
        return repr(float(record.wake_at))  # a delayed start, or a retry's backoff
    return "0"


def queue_tag(queue: str | None) -> str:
    """How a named queue is spelled in queue keys (the default queue: empty)."""
    return "" if queue is None else "=" + queue


def record_args(record: RunRecord) -> list[Any]:
    """The record and the fields the scripts index it by: record, status, workflow, parent,
    queue key, priority, due score, group lane (``lane_of``), group width, pin."""
    width = (record.limits or {}).get("group_concurrency", 1)
    return [
        orjson.dumps(record.to_json()),
        record.status.value,
        record.workflow,
        record.parent_id or "",
        f"{int(record.priority)}|{queue_tag(record.queue)}",
        str(int(record.priority)),
        due_score(record),
        lane_of(record) or "",
        str(int(width)),
        record.deployment or "",
    ]


class Keeper:
    """Renews the keys an instance holds (leases, slots, schedule locks) while it holds them."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._held: dict[str, tuple[str, Callable[[str], None] | None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_renewed = time.monotonic()
        self._gone: dict[str, str] = {}
        """This instance's holder ids whose connection dropped, and why."""

    def hold(self, key: str, token: str, lost: Callable[[str], None] | None = None) -> None:
        """Keep ``key`` (without the prefix) alive while it holds ``token``; ``lost(why)`` is
        called once if it is found lost."""
        if not self._held:
            self._last_renewed = time.monotonic()
        self._held[key] = (token, lost)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._renew(), context=contextvars.Context()
            )
        gone = self._gone.get(_holder_of(key, token) or "")
        if gone is not None:  # taken under a holder id that died meanwhile: lost already
            self._lose(key, token, gone)

    def lose_holder(self, holder: str, why: str) -> None:
        """The connection of this instance's holder id ``holder`` dropped: every lease taken
        under it is lost (another instance may take it over at once)."""
        self._gone[holder] = why
        for key, (token, _) in list(self._held.items()):
            if _holder_of(key, token) == holder:
                self._lose(key, token, why)

    def drop(self, key: str, token: str) -> None:
        found = self._held.get(key)
        if found is not None and found[0] == token:
            del self._held[key]

    async def _renew(self) -> None:
        ttl = self._store.lease_ttl
        while self._held:
            await asyncio.sleep(ttl / 3)
            items = list(self._held.items())
            if not items:
                break
            args: list[Any] = [int(ttl * 1000)]
            for key, (token, _) in items:
                args += [key, token]
            try:
                lost = await self._store._eval(_scripts.RENEW, *args, again=True)
            except (StoreError, RedisError, OSError) as error:
                if time.monotonic() - self._last_renewed > ttl:
                    why = f"this process could not renew it for {ttl:g} s ({error})"
                    for key, (token, _) in items:
                        self._lose(key, token, why)
                continue
            self._last_renewed = time.monotonic()
            for number in lost:
                key, (token, _) = items[int(number) - 1]
                self._lose(key, token, "it expired or was taken over")

    def _lose(self, key: str, token: str, why: str) -> None:
        found = self._held.get(key)
        if found is None or found[0] != token:
            return  # given back meanwhile
        del self._held[key]
        if found[1] is not None:
            found[1](why)

    async def close(self) -> None:
        task, self._task = self._task, None
        self._held.clear()
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _holder_of(key: str, token: str) -> str | None:
    """The holder id in a lease's token (``<epoch>:<call>:<holder>``); None for other keys."""
    if not key.startswith("lease:"):
        return None
    return token.rpartition(":")[2]


class RedisLease(Lease):
    """Exclusive right to drive one run: the ``lease:<id>`` key, holding the lease's token
    (``<epoch>:<call>:<holder>``)."""

    def __init__(
        self,
        store: RedisStore,
        run_id: str,
        token: str,
        length: int,
        seq: int,
        read: tuple[RunRecord, list[Event], list[InboxMessage]] | None = None,
    ) -> None:
        """``length``: the journal's length when the lease was taken; ``seq``: the run's
        creation number (a save never changes it); ``read``: the record, journal and inbox a
        claim read along with the lease."""
        self.run_id = run_id
        self._seq = seq
        self._length: int | None = length
        """The journal's length as this lease's writes left it; None once a write's outcome is
        unknown (the connection failed twice): the lease writes nothing more."""
        self._store = store
        self._token = token
        self._key = "lease:" + run_id
        self._read = read
        self._inbox = None if read is None else read[2]
        self._released = False
        self._lost: LeaseLost | None = None
        self._callbacks: list[Callable[[StoreError], None]] = []
        self._lock = asyncio.Lock()
        self._soon: list[Event] = []
        self._save_next: RunRecord | None = None
        """A record to save with the next write (``save_soon``)."""
        self._inflight: asyncio.Future[Any] | None = None
        self._soon_task: asyncio.Task[None] | None = None
        store._keeper.hold(self._key, self._token, self._lose)

    def _lose(self, why: str) -> None:
        if self._lost is not None or self._released:
            return
        self._lost = LeaseLost(f"lease on run {self.run_id} was lost: {why}")
        for callback in self._callbacks:
            try:
                callback(self._lost)
            except Exception:  # one callback's failure must not keep the others from running
                log.exception("wf redis: a lost-lease callback failed")

    def on_lost(self, callback: Callable[[StoreError], None]) -> None:
        self._callbacks.append(callback)
        if self._lost is not None:
            callback(self._lost)

    def _check(self) -> None:
        if self._released:
            raise StoreError(f"lease on run {self.run_id} was released")
        if self._lost is not None:
            raise self._lost

    async def read_run(self, store: Store) -> tuple[RunRecord, list[Event]]:
        if self._read is not None:
            record, journal, _ = self._read
            self._read = None
            return record, journal
        return await super().read_run(store)

    async def read_inbox(self, store: Store) -> list[InboxMessage]:
        first, self._inbox = self._inbox, None
        if first is not None:
            return first
        return await store.read_inbox(self.run_id)

    # -- the journal and the record ---------------------------------------------------------

    async def append(self, events: Sequence[Event]) -> None:
        await self._write(events, None)

    def append_soon(self, events: Sequence[Event]) -> None:
        self._check()
        self._soon.extend(events)
        if self._soon_task is None:
            self._soon_task = asyncio.get_running_loop().create_task(
                self._write_soon(), context=contextvars.Context()
            )

    async def _write_soon(self) -> None:
        try:
            await asyncio.sleep(SOON)
            if self._soon and not self._released and self._lost is None:
                await self._write((), None)
        except (StoreError, RedisError, OSError) as error:
            log.debug("wf redis: writing step_started events of %s failed: %s", self.run_id, error)
        finally:
            self._soon_task = None

    async def save(self, record: RunRecord) -> None:
        await self._write((), record)

    def save_soon(self, record: RunRecord) -> bool:
        """Carry a record that marks the run running with the lease's next write."""
        if self._released or self._lost is not None:
            return False
        self._save_next = record.copy()
        return True

    async def append_and_save(self, events: Sequence[Event], record: RunRecord) -> None:
        await self._write(events, record)  # one script: both or neither

    async def _write(self, events: Sequence[Event], record: RunRecord | None) -> None:
        self._check()
        async with self._lock:  # one write at a time: a lease's appends stay in order
            if self._inflight is not None:
                # A write whose caller was cancelled: its outcome settles the length.
                with contextlib.suppress(BaseException):
                    await asyncio.shield(self._inflight)
            self._check()
            batch = [*self._soon, *events]
            self._soon = []
            if record is None:
                record = self._save_next
            # Taken now (or replaced by ``record``): one that ``save_soon`` queues while this
            # write awaits its answer goes with the next write, not cleared with this one.
            self._save_next = None
            if not batch and record is None:
                return
            if self._length is None:
                raise LeaseLost(
                    f"lease on run {self.run_id} cannot write: an earlier write's outcome is "
                    "unknown (Redis failed or refused it); the run is driven again later"
                )
            if record is not None and record.seq != self._seq:
                record = record.copy()
                record.seq = self._seq  # its place in the creation sequence is the store's
            head: list[Any] = ["0"] if record is None else ["1", *record_args(record)]
            encoded = [orjson.dumps(event) for event in batch]
            length = self._length
            self._length = None  # unknown until the answer comes
            ttl = str(self._store._ttl_ms())  # a lease that lapsed unseized is taken back
            args = [self.run_id, self._token, ttl, str(length), *head, *encoded]
            future = self._inflight = self._store._batcher.submit(_scripts.WRITE, args)
            future.add_done_callback(lambda f: self._settle(f, length))
            await asyncio.shield(future)
            if self._lost is not None:
                raise self._lost

    def _settle(self, future: asyncio.Future[Any], length: int) -> None:
        """Take in a write's answer (also for a caller that was cancelled meanwhile)."""
        if self._inflight is future:
            self._inflight = None
        if future.cancelled() or future.exception() is not None:
            return  # outcome unknown: ``_length`` stays None, the lease writes no more
        done = int(future.result())
        if done == 0:
            self._length = length
            self._lose("another driver took the run over (fencing epoch changed)")
        elif done < 0:
            self._length = length
            self._lose(f"its journal changed under it (expected {length} events)")
        else:
            self._length = done - 1

    async def ack_inbox(self, message_ids: Sequence[str]) -> None:
        if message_ids:
            await self._store._call("hdel", self._store._key("in:", self.run_id), *message_ids)

    # -- streams and logs (idempotent or best effort: not fenced) ---------------------------

    async def write_chunk(self, stream: str, index: int, data: bytes) -> None:
        await self._store._eval(
            _scripts.WRITE_CHUNK, self.run_id, stream, str(index), data, again=True
        )

    async def close_stream(self, stream: str, chunks: int) -> None:
        await self._store._eval(_scripts.CLOSE_STREAM, self.run_id, stream, again=True)

    async def append_logs(self, entries: Sequence[LogEntry]) -> None:
        if entries:
            encoded = [orjson.dumps(entry) for entry in entries]
            await self._store._eval(_scripts.APPEND_LOGS, self.run_id, *encoded)

    async def release(self) -> None:
        if self._released:
            return
        try:
            if (self._soon or self._save_next is not None) and self._lost is None:
                with contextlib.suppress(StoreError):
                    await self._write((), None)
        finally:
            self._released = True
            self._store._keeper.drop(self._key, self._token)
            if self._lost is None:
                with contextlib.suppress(StoreError):
                    await self._store._batcher.submit(_scripts.RELEASE, [self.run_id, self._token])
