"""Time as the engine sees it: a ``Clock`` gives the wall time and sleeps until a deadline.

The engine never calls ``time.time()`` or ``asyncio.sleep`` directly, so a test can swap in
``wf.testing.MockClock`` and sleep for days instantly.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock time in epoch seconds, and waiting for it."""

    def now(self) -> float:
        """The current time, in seconds since the epoch."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline``."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)
