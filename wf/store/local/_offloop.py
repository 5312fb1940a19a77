"""Group commit in a thread, for writes that must not hold the event loop: messages posted to
runs (a server's wakes, cancels and hook deliveries, ``LocalStore.post``).

``_commit`` flushes a worker's journal appends on the loop thread (every waiting appender is
in the batch, so there is nothing to overlap, and the thread hop would double a lone
appender's latency); only a batch holding a run's creation goes to a thread of its own there,
while the runs in flight go on. A server is the other case: 50 clients sending wake-ups made three
fsyncs per message on the loop, and a cheap request waited behind all of them. Here one flush
at a time runs in a thread of its own: the loop serves other requests meanwhile, and whatever
is asked while a flush runs shares the next one, so a burst costs a few flushes, however many
messages.

A flush is ``_commit``'s: one ``syncfs`` for a batch, or, on a busy file system
(``_pressure``), an fsync of each path the batch owes. A request only ever covers what its
caller wrote *before* asking, so a caller that needs one write durable before the next is made
(a post's message before its due entry) asks, waits, and only then writes the next: requests of
several callers in different stages may share a flush without reordering any caller's writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

from wf._exceptions import StoreError
from wf.store.local._commit import others_ready, sync_owed


class OffLoopFlusher:
    """One event loop's flushes made in a thread, one at a time, batching the requests that
    wait meanwhile; a request that nothing could share is flushed at once on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._whole: dict[int, tuple[str, set[str] | None]] = {}
        self._marks: dict[int, int] = {}
        """Per device, the oldest ``_fsops.mark`` the waiting requests took."""
        self._waiters: list[asyncio.Future[None]] = []
        self._running = False
        """A flush is under way in the thread, or scheduled to start (``loop.call_soon``)."""
        self.flushes = 0
        """Number of flushes so far (for benchmarks and tests)."""

    def request(
        self, path: str, device: int, since: int, owed: Collection[str] | None = None
    ) -> asyncio.Future[None]:
        """Ask for ``owed`` (paths whose fsyncs ``_fsops.deferred_fsyncs`` collected) or,
        without it, everything written so far on ``device`` (``path`` is on it) to be made
        durable, all of it written after the ``_fsops.mark`` that returned ``since``; the
        future is done once it is (or holds the flush's error).

        Await it shielded: a caller cancelled meanwhile leaves the flush to run on for the
        others in its batch, and must not remove what it wrote until the future is done (the
        flush may be opening those paths by name)."""
        waiter: asyncio.Future[None] = self.loop.create_future()
        if not self._running and not others_ready(self.loop):
            # Nothing could share the flush, nor run on the loop meanwhile: made right here,
            # it saves a lone post three thread hops (measured on tmpfs, where a flush is
            # free, on a loaded 2-core machine: 0.16 ms a lone post, 0.6-1.6 ms with them).
            self.flushes += 1
            error = sync_owed(
                {device: (path, None if owed is None else set(owed))}, {device: since}
            )
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
            return waiter
        known_path, known = self._whole.get(device, (path, set()))
        merged = None if owed is None or known is None else known | set(owed)
        self._whole[device] = (known_path, merged)
        self._marks[device] = min(self._marks.get(device, since), since)
        self._waiters.append(waiter)
        if not self._running:
            # Started at the end of this loop tick, so that the requests made in the same tick
            # (a gather of posts) join it: one loop iteration, against a flush for each.
            self._running = True
            self.loop.call_soon(self._start)
        return waiter

    def _start(self) -> None:
        whole, marks, waiters = self._whole, self._marks, self._waiters
        self._whole, self._marks, self._waiters = {}, {}, []
        done = self.loop.run_in_executor(_executor(), sync_owed, whole, marks)
        done.add_done_callback(lambda future: self._finish(future, waiters))

    def _finish(
        self, future: asyncio.Future[StoreError | None], waiters: list[asyncio.Future[None]]
    ) -> None:
        self._running = False
        self.flushes += 1
        error: BaseException | None
        if future.cancelled():  # the loop is shutting down
            error = StoreError("flush abandoned: the event loop closed")
        else:
            error = future.exception() or future.result()
        for waiter in waiters:
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
        if self._waiters:
            self._running = True
            self._start()


_pool: tuple[int, ThreadPoolExecutor] | None = None


def _executor() -> ThreadPoolExecutor:
    """This process's flushing thread (a forked child makes its own: threads do not fork). Not
    the loop's default executor, which sync steps may fill."""
    global _pool
    if _pool is None or _pool[0] != os.getpid() or _lost(_pool[1]):
        _pool = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="wf-post-flush"))
    return _pool[1]


def _lost(pool: ThreadPoolExecutor) -> bool:
    """Whether the pool's thread was ended from outside it (``wf.cli._stopping`` ends every
    idle pool thread of the process as a command exits; a program that runs the command in
    itself goes on): the pool would take work it never runs, and every post wait forever."""
    threads = pool._threads
    return bool(threads) and not any(thread.is_alive() for thread in threads)


_flushers: dict[asyncio.AbstractEventLoop, OffLoopFlusher] = {}


def flusher_for(loop: asyncio.AbstractEventLoop) -> OffLoopFlusher:
    """The process-wide off-loop flusher of ``loop``."""
    found = _flushers.get(loop)
    if found is None:
        # Forget flushers of closed loops (tests make a loop per test).
        for old in [old for old in _flushers if old.is_closed()]:
            with contextlib.suppress(KeyError):
                del _flushers[old]
        found = _flushers[loop] = OffLoopFlusher(loop)
    return found
