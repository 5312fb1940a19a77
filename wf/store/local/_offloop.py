"""Group commit in a thread, for writes that must not hold the event loop: messages posted to
runs (a server's wakes, cancels and hook deliveries).

``_commit`` flushes on the loop thread, which suits a worker's journal appends (every waiting
appender is in the batch, so there is nothing to overlap, and the thread hop would double a
lone appender's latency). A server is the other case: 50 clients sending wake-ups made three
fsyncs per message on the loop, and a cheap ``GET /api/v1/store`` waited 657 ms (p50) behind
them. Here one flush at a time runs in a thread of its own: the loop serves other requests
meanwhile, and the posts that arrive during a flush share the next one, so a burst costs a
few flushes, however many messages.

A flush is ``_commit``'s: one ``syncfs`` for a batch, or, on a busy file system
(``_pressure``), an fsync of each path the batch owes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

from wf._exceptions import StoreError
from wf.store.local._commit import sync_owed


class OffLoopFlusher:
    """One event loop's flushes made in a thread, one at a time, batching the requests that
    wait meanwhile."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._whole: dict[int, tuple[str, set[str] | None]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._running = False
        self.flushes = 0
        """Number of flushes so far (for tests)."""

    async def sync_file_system(
        self, path: str, device: int, owed: Collection[str] | None = None
    ) -> None:
        """``Committer.sync_file_system``, flushed in a thread: return once ``owed`` (or,
        without it, everything written on ``device``, where ``path`` is) is durable."""
        known_path, known = self._whole.get(device, (path, set()))
        merged = None if owed is None or known is None else known | set(owed)
        self._whole[device] = (known_path, merged)
        waiter: asyncio.Future[None] = self.loop.create_future()
        self._waiters.append(waiter)
        if not self._running:
            self._start()
        # A cancelled poster leaves the flush to run on: the others in the batch wait for it.
        await asyncio.shield(waiter)

    def _start(self) -> None:
        whole, waiters = self._whole, self._waiters
        self._whole, self._waiters = {}, []
        self._running = True
        done = self.loop.run_in_executor(_executor(), sync_owed, whole)
        done.add_done_callback(lambda future: self._finish(future, waiters))

    def _finish(
        self, future: asyncio.Future[StoreError | None], waiters: list[asyncio.Future[None]]
    ) -> None:
        self._running = False
        self.flushes += 1
        error = future.exception() if not future.cancelled() else asyncio.CancelledError()
        if error is None:
            error = future.result()
        for waiter in waiters:
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
        if self._waiters:
            self._start()


_pool: tuple[int, ThreadPoolExecutor] | None = None


def _executor() -> ThreadPoolExecutor:
    """This process's flushing thread (a forked child makes its own: threads do not fork). Not
    the loop's default executor, which sync steps may fill."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="wf-post-flush"))
    return _pool[1]


_flushers: dict[asyncio.AbstractEventLoop, OffLoopFlusher] = {}


def flusher_for(loop: asyncio.AbstractEventLoop) -> OffLoopFlusher:
    """The process-wide off-loop flusher of ``loop``."""
    found = _flushers.get(loop)
    if found is None:
        for old in [old for old in _flushers if old.is_closed()]:
            with contextlib.suppress(KeyError):
                del _flushers[old]
        found = _flushers[loop] = OffLoopFlusher(loop)
    return found
