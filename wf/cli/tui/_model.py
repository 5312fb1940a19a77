"""What the run screen shows, read from the store: ``wf.admin.run_detail`` plus liveness.

The detail (shared with ``wf inspect --json``) has everything in the journal, the record and
the inbox. One more fact answers "why isn't it moving?": for a running run, whether any process
still holds its lock.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from wf import RunStatus

if TYPE_CHECKING:
    from wf.admin import RunDetail
    from wf.store import Store


@dataclasses.dataclass
class RunView:
    """One load of a run: its detail (and that as ``wf inspect --json`` data), whether its
    driver is gone, at time ``now``."""

    detail: RunDetail
    data: dict[str, Any]
    driver_gone: bool | None
    now: float

    @property
    def inbox(self) -> list[str]:
        """Kinds of the messages posted to the run and not yet delivered."""
        return self.detail.inbox

    @property
    def run(self) -> dict[str, Any]:
        """The run record as JSON."""
        run: dict[str, Any] = self.data["run"]
        return run


class LivenessProbe:
    """Whether a running run's driver is gone, by trying its lock.

    A running run whose lock is free has lost its process: ``try_acquire`` succeeds, and the lease
    is released at once (a worker that tries in that instant skips the run and finds it due on
    its next pass). Releasing a lease notifies the run's watchers, so the answer is cached per
    record version and re-checked at most every ``interval`` seconds: a screen that refreshes on
    notifications must not probe itself into a loop.
    """

    def __init__(self, store: Store, interval: float = 5.0) -> None:
        self._store = store
        self._interval = interval
        self._cache: dict[str, tuple[float, float, bool]] = {}

    async def driver_gone(self, run_id: str, status: str, updated_at: float) -> bool | None:
        """True if nobody drives the running run; None for runs that are not running."""
        if status != RunStatus.RUNNING.value:
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


async def load_run(store: Store, run_id: str, now: float, probe: LivenessProbe) -> RunView:
    """Read everything the run screen shows. Raises ``wf.RunNotFound``."""
    from wf.admin import run_detail

    detail = await run_detail(store, run_id, now=now)
    run = detail.run
    gone = await probe.driver_gone(run_id, run.status.value, run.updated_at)
    return RunView(detail, detail.to_json(), gone, now)
