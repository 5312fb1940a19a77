"""Time as the engine sees it: a ``Clock`` gives the wall time and sleeps until a deadline.

The engine never calls ``time.time()`` or ``asyncio.sleep`` directly, so a test can swap in
``wf.testing.MockClock`` and sleep for days instantly.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol


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


def thread_work(clock: Clock) -> contextlib.AbstractContextManager[Any]:
    """Mark work running in a thread (a sync step) for a clock that must not move meanwhile.

    A fake clock that jumps when the event loop is idle (``wf.testing.MockClock``) offers
    ``busy()``: the loop looks idle while a thread works, and a jump then would expire timers
    around it (a ``wf.timeout(10)`` around two 50 ms sync steps). Other clocks ignore it.
    """
    busy = getattr(clock, "busy", None)
    return busy() if busy is not None else contextlib.nullcontext()
