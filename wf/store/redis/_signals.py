"""Change notifications of the Redis store: pub/sub, so waits end when something changes.

Every write script publishes the run id it touched, inside the script (so the announcement is
never sent for a write that did not happen): on ``<prefix>cq`` when the queue may have changed
(a run created, saved, posted to or released; a hook registered; a grouped run ended), on
``<prefix>cr`` when only a run's journal, streams or logs grew, or a run ended outside a group.
An instance subscribes to ``cq`` from its first call, and to ``cr`` only from its first
``wait_for_run`` or ``wait_for_change`` (workers never need it), each on a connection of its own.

A wait must not miss a change made after the caller's last read but announced before the wait
began: reads note themselves (``reading_queue``, ``reading_run``, ``reading_runs``), an
announcement after such a read marks it stale, and a wait on a stale read returns at once. A
subscription's first wait returns at once too (changes before it were not heard). When a
subscription's connection drops, every waiter is woken and it reconnects with backoff; after a
failover that may have left it on the old primary, the store makes it again (``redial``). Waits
are bounded by their timeouts in any case: notifications are hints, the poll is the fallback.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from wf._tasks import cancel_within
from wf.store._inboxes import InboxWatchers

log = logging.getLogger("wf.store.redis")

SCHEDULES = "!schedules"
"""Published on the queue channel when a schedule was saved or removed (no run id starts with
``!``): counted in ``Signals.schedule_changes``, so that workers read their schedules again."""

RATES = "!rates"
"""Published on the queue channel when a rate limit's start was taken back (``try_rate``'s
caller cancelled before it heard): counted in ``Signals.rate_returns``, so that workers
holding runs for a rate limit read it again. An older wf takes it for any change."""

READ_TICK = 0.25
"""Seconds a listener's read waits for a message before it looks whether it was replaced
(``redial``) or closed: a replaced listener's connection stays open on the old server until
then (not cancelled: see ``redial``)."""

WATCHED_RUNS = 10_000
"""Runs whose last read an instance remembers (least recently read are forgotten first)."""


class Signals:
    """The announcements an instance hears, and the waits they end."""

    def __init__(self, connect: Callable[[], aioredis.Redis], prefix: str) -> None:
        self._connect = connect
        self.queue_channel = prefix + "cq"
        self.run_channel = prefix + "cr"
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._retired: set[asyncio.Task[None]] = set()
        """Listening tasks replaced by ``redial``, until they end."""
        self._ready: dict[str, asyncio.Event] = {}
        self._activity = asyncio.Event()
        self._change = asyncio.Event()
        self._queue_stale = False
        self._runs_stale = False
        self._watched: collections.OrderedDict[str, bool] = collections.OrderedDict()
        self._run_events: dict[str, asyncio.Event] = {}
        self.inboxes = InboxWatchers()
        """Watchers of runs' inboxes (``RedisStore.watch_inbox``): a post publishes the run
        id on the queue channel, so every announcement there of a watched run calls them."""
        self._closed = False
        self.schedule_changes = 0
        """Schedule changes heard of (``SCHEDULES``; and a new subscription, which may have
        missed some)."""
        self.rate_returns = 0
        """Rate limits' starts taken back heard of (``RATES``; and a new subscription)."""

    # -- reads note themselves --------------------------------------------------------------

    def reading_queue(self) -> None:
        self._queue_stale = False

    def reading_runs(self) -> None:
        self._runs_stale = False

    def reading_run(self, run_id: str) -> None:
        self._watched[run_id] = False
        self._watched.move_to_end(run_id)
        if len(self._watched) > WATCHED_RUNS:
            self._watched.popitem(last=False)

    # -- listening ----------------------------------------------------------------------------

    async def listen(self, channel: str) -> bool:
        """Subscribe to ``channel`` if not yet; True if this call started it (the caller's
        wait then returns at once: what was announced before was not heard)."""
        if channel in self._tasks:
            return False
        ready = self._subscribe(channel)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await ready.wait()
        return True

    def _subscribe(self, channel: str) -> asyncio.Event:
        """Start the task that listens on ``channel``; the event is set once it listens."""
        ready = self._ready[channel] = asyncio.Event()
        self._tasks[channel] = asyncio.get_running_loop().create_task(
            self._listen(channel), context=contextvars.Context()
        )
        return ready

    def redial(self) -> None:
        """Listen again, on new connections: a failover may have moved the address (a DNS
        name, a proxy) to a new primary, and a subscription left on the old server, a replica
        now, may hear none of its writes. Each listening task is replaced at once; the one
        replaced ends by itself within its read's timeout, ``READ_TICK`` (not cancelled: a
        cancelled read inside redis-py can be swallowed, and its connection left open). A
        subscription not yet made is left alone: it reaches the address as it is now."""
        if self._closed:
            return
        for channel, task in list(self._tasks.items()):
            if self._ready[channel].is_set():
                self._retired.add(task)
                task.add_done_callback(self._retired.discard)
                self._subscribe(channel)

    def _current(self, channel: str) -> bool:
        """Whether the running task is the one listening on ``channel`` (not replaced)."""
        return not self._closed and self._tasks.get(channel) is asyncio.current_task()

    async def _listen(self, channel: str) -> None:
        ready = self._ready[channel]  # this task's: a task replacing it has its own
        delay = 0.05
        while self._current(channel):
            client = self._connect()
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(channel)
                # Read with a timeout rather than ``listen()``: a cancelled read inside
                # redis-py can be swallowed, and ``close`` must not wait on it forever.
                while self._current(channel):
                    message = await pubsub.get_message(timeout=READ_TICK)
                    if message is None:
                        continue
                    if message.get("type") == "subscribe":
                        ready.set()
                        self._wake_all()  # anything may have changed while not subscribed
                        delay = 0.05
                    elif message.get("type") == "message":
                        self._heard(channel, message.get("data"))
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as error:
                log.debug("wf redis: listening on %s failed (%s); reconnecting", channel, error)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8
                with contextlib.suppress(Exception):
                    await client.aclose()
            if not self._current(channel):
                return
            self._wake_all()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _heard(self, channel: str, data: Any) -> None:
        run_id = data.decode() if isinstance(data, bytes) else str(data or "")
        if run_id == SCHEDULES:
            self.schedule_changes += 1
            run_id = ""
        elif run_id == RATES:
            self.rate_returns += 1
            run_id = ""
        if channel == self.queue_channel:
            self._queue_stale = True
            self._activity.set()
            self._activity = asyncio.Event()
            if run_id:
                self.inboxes.heard(run_id)
        self._runs_stale = True
        self._change.set()
        self._change = asyncio.Event()
        if run_id:
            if run_id in self._watched:
                self._watched[run_id] = True
            event = self._run_events.pop(run_id, None)
            if event is not None:
                event.set()

    def _wake_all(self) -> None:
        self._queue_stale = self._runs_stale = True
        self.schedule_changes += 1
        self.rate_returns += 1
        for run_id in self._watched:
            self._watched[run_id] = True
        for event in (self._activity, self._change, *self._run_events.values()):
            event.set()
        self._activity, self._change = asyncio.Event(), asyncio.Event()
        self._run_events.clear()
        self.inboxes.heard_all()

    # -- waits ------------------------------------------------------------------------------

    async def wait_activity(self, timeout: float) -> None:
        if await self.listen(self.queue_channel) or self._queue_stale:
            self._queue_stale = False
            return
        await _wait(self._activity, timeout)

    async def wait_change(self, timeout: float) -> None:
        fresh = await self.listen(self.queue_channel)
        if await self.listen(self.run_channel) or fresh or self._runs_stale:
            self._runs_stale = False
            return
        await _wait(self._change, timeout)

    async def watch_run(self, run_id: str) -> asyncio.Event | None:
        """Start watching ``run_id``: None when the wait should return at once (a first
        subscription, or a change since the caller's last read of the run)."""
        fresh = await self.listen(self.queue_channel)
        if await self.listen(self.run_channel) or fresh or self._watched.get(run_id):
            if run_id in self._watched:
                self._watched[run_id] = False
            return None
        event = self._run_events.get(run_id)
        if event is None:
            event = self._run_events[run_id] = asyncio.Event()
        return event

    def watch_inbox(self, run_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """``InboxWatchers.add``, subscribing to the queue channel if not yet (its first
        message calls every watcher: posts before it were not heard)."""
        if self.queue_channel not in self._tasks and not self._closed:
            self._subscribe(self.queue_channel)
        return self.inboxes.add(run_id, callback)

    async def close(self) -> None:
        self._closed = True
        tasks = [*self._tasks.values(), *self._retired]
        self._tasks.clear()
        # Bounded: a listener whose cancellation redis-py swallowed ends within its read's
        # timeout, seeing ``_closed``.
        await cancel_within(tasks, 2.0)
        self._wake_all()

    def abandon(self) -> None:
        """Forget the tasks of an event loop that is gone (without awaiting them)."""
        self._closed = True
        for task in [*self._tasks.values(), *self._retired]:
            with contextlib.suppress(RuntimeError):
                task.cancel()
        self._tasks.clear()


async def _wait(event: asyncio.Event, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
