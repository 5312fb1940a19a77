"""The threads sync steps run in: a pool of the engine's own, never asyncio's default executor.

asyncio's default executor has ``min(32, cpus + 4)`` threads, shared with everything else a
process hands to threads (the local store's file work among it): a worker driving 100 runs
would run at most 6 sync steps at once on a 2-core machine, and a few hung sync steps would
starve every other one, and the store's own work. Each engine has its own pool instead, sized
to what may run at once (``Engine.step_threads``); its threads are created as steps need them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("wf.worker")


def default_size() -> int:
    """asyncio's default executor's size: the pool of a process that is no worker."""
    return min(32, (os.cpu_count() or 1) + 4)


class StepThreads:
    """A thread pool of ``size`` threads, created lazily, that counts the calls it holds and
    says when one has to wait for a free thread."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.busy = 0
        """Calls submitted and not ended (running, or queued for a thread)."""
        self._full = False

    def run(self, fn: Callable[[], Any], what: str) -> asyncio.Future[Any]:
        """Run ``fn`` in a thread of the pool, from the event loop; ``what`` (a step and its
        run) is named in the warning given when every thread is busy and ``fn`` must wait."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.size, thread_name_prefix="wf-step"
            )
        with self._lock:
            self.busy += 1
            waits = self.busy > self.size
            said, self._full = self._full, waits
        if waits and not said:
            log.warning(
                "%s waits for a free thread: all %d step threads are busy with sync steps "
                "(its step_started is written, its code has not begun; raise step_threads or "
                "the worker's concurrency, or make long sync steps poll wf.cancel_requested())",
                what,
                self.size,
            )
        future = self._pool.submit(fn)
        future.add_done_callback(self._ended)  # also when cancelled before it ran
        return asyncio.wrap_future(future)

    def _ended(self, _future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self.busy -= 1
            if self.busy < self.size:
                self._full = False

    def shutdown(self) -> None:
        """Take no more calls; calls running or queued go on (threads cannot be stopped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
