"""What the run screen shows, read from the store: ``wf.admin.run_detail``.

The detail (shared with ``wf inspect --json`` and the web UI) has everything in the journal,
the record and the inbox, and for a running run whether any process still holds its lock
(``wf.admin._liveness``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.admin import LivenessProbe, RunDetail
    from wf.store import Store


@dataclasses.dataclass
class RunView:
    """One load of a run: its detail (and that as ``wf inspect --json`` data,
    ``wf.admin.detail_json``), whether its driver is gone, at time ``now``."""

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


async def load_run(store: Store, run_id: str, now: float, probe: LivenessProbe) -> RunView:
    """Read everything the run screen shows (``probe``: the app's, whose cache keeps a screen
    that refreshes on each change from probing itself into a loop). Raises
    ``wf.RunNotFound``."""
    from wf.admin import detail_json, run_detail
    from wf.admin._read import OFF_LOOP_EVENTS

    detail = await run_detail(store, run_id, now=now, probe=probe)
    if len(detail.events) > OFF_LOOP_EVENTS:
        # A long run's document takes a while (0.35 s for 30,000 steps): keys still answer.
        data = await asyncio.to_thread(detail_json, detail)
    else:
        data = detail_json(detail)
    return RunView(detail, data, detail.driver_gone, now)
