"""Whether a running run's driver is gone: the one fact a journal cannot tell.

A run whose status is ``running`` may be driven right now, or its process may have died (a
worker recovers it once its lease is free). ``run_detail`` asks the probe here so that every
front end (``wf inspect``, the terminal UI, the web UI and the HTTP API) shows the same answer.
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.store import Store

_RUNNING = "running"


class LivenessProbe:
    """Whether a running run's driver is gone, by trying its lock.

    A running run whose lock is free has lost its process: ``try_acquire`` succeeds, and the
    lease is released at once (a worker that tries in that instant skips the run and finds it
    due on its next pass). Releasing a lease notifies the run's watchers, so the answer is
    cached per record version and re-checked at most every ``interval`` seconds: a screen that
    refreshes on notifications must not probe itself into a loop.
    """

    def __init__(self, store: Store, interval: float = 5.0) -> None:
        self._store = store
        self._interval = interval
        self._cache: dict[str, tuple[float, float, bool]] = {}

    async def driver_gone(self, run_id: str, status: str, updated_at: float) -> bool | None:
        """True if nobody drives the running run; None for runs that are not running."""
        if status != _RUNNING:
            self._cache.pop(run_id, None)
            return None
        cached = self._cache.get(run_id)
        clock = time.monotonic()
        if cached is not None and cached[0] == updated_at and clock - cached[1] < self._interval:
            return cached[2]
        lease = await self._store.try_acquire(run_id)
        gone = lease is not None
        if lease is not None:
            await lease.release()
        self._cache[run_id] = (updated_at, clock, gone)
        return gone


_PROBES: weakref.WeakKeyDictionary[Store, LivenessProbe] = weakref.WeakKeyDictionary()


def probe_for(store: Store) -> LivenessProbe:
    """The probe of ``store`` in this process, so that every reader of a run shares its cache
    (a page refreshed on each change probes at most every few seconds)."""
    try:
        probe = _PROBES.get(store)
        if probe is None:
            probe = _PROBES[store] = LivenessProbe(store)
    except TypeError:  # a store that cannot be weakly referenced: a probe of its own
        return LivenessProbe(store)
    return probe
