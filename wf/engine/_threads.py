"""The threads sync steps run in: a pool of the engine's own, never asyncio's default executor.

asyncio's default executor has ``min(32, cpus + 4)`` threads, shared with everything else a
process hands to threads (the local store's file work among it): a worker driving 100 runs
would run at most 6 sync steps at once on a 2-core machine, and a few hung sync steps would
starve every other one, and the store's own work. Each engine has its own pool instead, sized
to what may run at once (``Engine.step_threads``); its threads are created as steps need them.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("wf.worker")


def default_size() -> int:
    """asyncio's default executor's size: the pool of a process that is no worker."""
    return min(32, (os.cpu_count() or 1) + 4)


WAIT_WARN = 1.0
"""Seconds a sync step may wait for a free thread before the process says so: a short queue
behind instant steps (a ``wf.map`` over hundreds of them) is the pool working, not a
misconfiguration."""

WARN_EVERY = 60.0
"""Seconds between two such warnings of one pool at most: a pool too small for its load says
so once a minute, not once per step."""


class StepThreads:
    """A thread pool of ``size`` threads, created lazily, that counts the calls it holds and
    says when one has waited ``warn_after`` seconds for a free thread (at most once every
    ``warn_every`` seconds of ``clock``)."""

    def __init__(
        self,
        size: int,
        *,
        warn_after: float = WAIT_WARN,
        warn_every: float = WARN_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.warn_after = warn_after
        self.warn_every = warn_every
        self._clock = clock
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.busy = 0
        """Calls submitted and not ended (running, or queued for a thread)."""
        self._said_at: float | None = None
        self._queued: collections.deque[tuple[float, str, concurrent.futures.Future[Any]]] = (
            collections.deque()
        )
        """Calls that had to queue, with the loop time at which to look whether they began."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def run(self, fn: Callable[[], Any], what: str) -> asyncio.Future[Any]:
        """Run ``fn`` in a thread of the pool, from the event loop; ``what`` (a step and its
        run) is named in the warning given when ``fn`` is still waiting for a free thread
        ``warn_after`` seconds on."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.size, thread_name_prefix="wf-step"
            )
        with self._lock:
            self.busy += 1
            waits = self.busy > self.size
        future = self._pool.submit(fn)
        future.add_done_callback(self._ended)  # also when cancelled before it ran
        if waits:
            # Looked at once, ``warn_after`` seconds on, by one timer of the loop for all the
            # calls queued (a timer each cost a queued call three times as much, and was
            # cancelled from the pool's thread, which asyncio's handles do not allow).
            loop = asyncio.get_running_loop()
            self._queued.append((loop.time() + self.warn_after, what, future))
            if self._timer is None or self._timer_loop is not loop:
                self._timer_loop = loop
                self._timer = loop.call_later(self.warn_after, self._look, loop)
        return asyncio.wrap_future(future)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: each queued call whose ``warn_after`` has run out is looked at (and
        forgotten); the timer is set again for the next one, if any."""
        if loop is not self._timer_loop:
            return  # a timer of a loop the pool has left for another
        self._timer = None
        queued = self._queued
        now = loop.time()
        while queued and queued[0][0] <= now:
            _due, what, future = queued.popleft()
            if not (future.running() or future.done()):
                self._still_waiting(what)
        if queued:
            self._timer = loop.call_at(queued[0][0], self._look, loop)

    def _still_waiting(self, what: str) -> None:
        """A call queued ``warn_after`` seconds ago whose code has not begun: say so, at most
        once every ``warn_every`` seconds."""
        now = self._clock()
        if self._said_at is not None and now - self._said_at < self.warn_every:
            return
        self._said_at = now
        log.warning(
            "%s has waited %gs for a free thread: all %d step threads are busy with sync steps, "
            "%d more call(s) queued (its step_started is written, its code has not begun; "
            "raise step_threads or the worker's concurrency, or make long sync steps poll "
            "wf.cancel_requested())",
            what,
            self.warn_after,
            self.size,
            max(0, self.busy - self.size),
        )

    def _ended(self, _future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self.busy -= 1

    def shutdown(self) -> None:
        """Take no more calls; calls running or queued go on (threads cannot be stopped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
