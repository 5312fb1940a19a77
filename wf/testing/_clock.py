"""A deterministic clock for tests: time moves only when told, or jumps when everyone sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Iterator


class MockClock:
    """A fake wall clock.

    ``jump(seconds)`` moves time forward and wakes the sleepers that became due. With
    ``autojump=True`` (the default) the clock jumps by itself to the earliest sleeper's deadline
    once the event loop has gone ``idle_turns`` turns with no other sleeper added, like trio's
    ``MockClock(autojump_threshold=0)``: a test of a three-day sleep takes milliseconds.

    Work in threads (sync steps) counts as activity: while any runs (``busy()``, which the engine
    enters around every sync step), the clock does not jump, however idle the loop looks, so a
    ``wf.timeout(10)`` around two 50 ms sync steps does not expire.
    """

    def __init__(
        self, start: float = 1_800_000_000.0, *, autojump: bool = True, idle_turns: int = 20
    ) -> None:
        self._now = start
        self.autojump = autojump
        self.idle_turns = idle_turns
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._jumper: asyncio.Task[None] | None = None
        self._changes = 0
        self._busy = 0
        self._idle: asyncio.Event | None = None

    def now(self) -> float:
        """The fake current time (epoch seconds)."""
        return self._now

    def jump(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and wake everyone now due."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        self._now += seconds
        self._wake_due()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Within the block, work goes on outside the event loop: do not auto-jump.

        Enter and leave it on the event loop's thread (around the ``await`` of the thread).
        """
        self._busy += 1
        self._changes += 1
        try:
            yield
        finally:
            self._busy -= 1
            self._changes += 1
            if self._busy == 0 and self._idle is not None:
                self._idle.set()

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    async def sleep_until(self, deadline: float) -> None:
        """Wait until the fake time reaches ``deadline``."""
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._seq), future))
        self._changes += 1
        if self.autojump and (self._jumper is None or self._jumper.done()):
            self._jumper = asyncio.get_running_loop().create_task(self._autojump())
        await future

    async def _autojump(self) -> None:
        while True:
            self._sleepers = [s for s in self._sleepers if not s[2].done()]
            heapq.heapify(self._sleepers)
            if not self._sleepers:
                return
            seen = self._changes
            for _ in range(self.idle_turns):
                await asyncio.sleep(0)
            if seen != self._changes:
                continue
            if self._busy:
                # A sync step runs in a thread: time stands still until it is done.
                self._idle = asyncio.Event()
                await self._idle.wait()
                continue
            # Threads (sync steps) may still be running; give them a moment of real time.
            await asyncio.sleep(0.001)
            # Sleepers cancelled meanwhile (a run that suspended drops its timers) do not count:
            # jumping to one would move time for nobody.
            while self._sleepers and self._sleepers[0][2].done():
                heapq.heappop(self._sleepers)
            if seen != self._changes or not self._sleepers:
                continue
            deadline = self._sleepers[0][0]
            if deadline > self._now:
                self._now = deadline
            self._wake_due()
