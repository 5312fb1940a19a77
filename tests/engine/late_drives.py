"""A run's result from a drive that comes late: its first driver crashed, and a new engine
drives it long after its timers and deadlines (the durable clock decides, not this drive's)."""

from __future__ import annotations

from typing import Any

import wf
from wf.testing import MockClock


async def result_of_a_late_drive(
    store: wf.testing.MemoryStore, clock: MockClock, run_id: str, after: float = 1000.0
) -> Any:
    """The run's result, driven by a new engine ``after`` seconds on (the clock then jumps
    on its own)."""
    clock.jump(after)
    clock.autojump = True
    async with wf.testing.TestEngine(store, clock) as engine:
        with engine.installed():
            return await wf.get_run(run_id).result()
