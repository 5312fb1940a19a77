"""What the run screen shows, read through the app's client: ``Admin.run_detail``.

The detail (shared with ``wf inspect --json`` and the web UI) has everything in the journal,
the record and the inbox, and for a running run whether any process still holds its lock
(``wf.admin._liveness``), whichever backend reads it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.admin import Admin, RunDetail


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


async def load_run(client: Admin, run_id: str) -> RunView:
    """Read everything the run screen shows, at the detail's own "now". Raises
    ``wf.RunNotFound`` (``wf.ResultExpired`` for a run retention deleted)."""
    from wf.admin import detail_json
    from wf.admin._read import OFF_LOOP_EVENTS

    detail = await client.run_detail(run_id)
    if len(detail.events) > OFF_LOOP_EVENTS:
        # A long run's document takes a while (0.35 s for 30,000 steps): keys still answer.
        data = await asyncio.to_thread(detail_json, detail)
    else:
        data = detail_json(detail)
    return RunView(detail, data, detail.driver_gone, detail.now)
