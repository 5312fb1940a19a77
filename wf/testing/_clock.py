"""A deterministic clock for tests: time moves only when told, or jumps when everyone sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
from collections.abc import Iterator

QUIET_WITHIN = 1.0
"""Seconds of real time ``MockClock.quiet`` waits at most: a sync step blocked until after the
caller's next move (a ``wf.resume_hook`` of an unknown token waits for quiet) must not hold
that caller longer."""


class MockClock:
    """A fake wall clock.

    ``jump(seconds)`` moves time forward and wakes the sleepers that became due. With
    ``autojump=True`` (the default) the clock jumps by itself to the earliest sleeper's deadline
    once the event loop has gone ``idle_turns`` turns with no other sleeper added, like trio's
    ``MockClock(autojump_threshold=0)``: a test of a three-day sleep takes milliseconds.

    Work outside the event loop counts as activity: while any is in flight (``busy()``), the
    clock does not jump, however idle the loop looks. Two kinds of work hold it so:

    - a sync step running in a thread (the engine enters ``busy()`` around every one), so a
      ``wf.timeout(10)`` around two 50 ms sync steps does not expire;
    - a store call the engine awaits (``TestEngine`` hands its engine the store, and the leases,
      slots and locks it gives out, with every call inside ``busy()``): a PostgreSQL round trip
      awaits a socket, and a sleep must not pass while another run talks to the database.
      The store's waits for news (``wait_for_activity``, ``wait_for_run``: a worker waiting for
      work, ``result()`` waiting for its run) are not work: the clock jumps while they wait.

    Why mark the work rather than wait for a stretch of real time with nothing happening, as
    trio's ``autojump_threshold`` does: a threshold is a guess of how long a round trip can take
    (on a loaded CI machine PostgreSQL's outlasted the millisecond this clock waits), and every
    jump would pay it, where marking costs no real time and is exact for everything the engine
    awaits. What it cannot see is work nobody awaits (a store's own background tasks); for
    that the jump still waits ``idle_turns`` loop turns and a millisecond of real time.
    """

    def __init__(
        self, start: float = 1_800_000_000.0, *, autojump: bool = True, idle_turns: int = 20
    ) -> None:
        if not math.isfinite(start):
            raise ValueError(f"start must be a finite time, not {start!r}")
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
        if not math.isfinite(seconds):
            raise ValueError(f"seconds must be a finite number, not {seconds!r}")
        if seconds < 0:
            raise ValueError("time only moves forward")
        self._now += seconds
        self._wake_due()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Within the block, work goes on outside the event loop: do not auto-jump.

        Enter and leave it on the event loop's thread, around the ``await`` of the work (a
        thread, a store call). Blocks may nest and overlap; the clock is free once all are left.
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

    async def _until_not_busy(self) -> None:
        # One event shared by every waiter: ``busy()`` sets only the latest.
        if self._idle is None or self._idle.is_set():
            self._idle = asyncio.Event()
        await self._idle.wait()

    async def quiet(self, rounds: int = 100, within: float = QUIET_WITHIN) -> None:
        """Return once the event loop has gone ``idle_turns`` turns with no sleeper added and
        no work in flight: what an auto-jump waits for (this moves no time itself; the
        auto-jump may meanwhile). Runs driven here have then gone as far as they can before
        their next timer or outside message.

        A loop that never goes quiet (a run sleeping in a loop while the clock jumps, a sync
        step blocked on what the caller does next) is given up on after ``rounds`` rounds of
        ``idle_turns`` turns that each saw a change or work in flight, or after ``within``
        seconds of real time, whichever comes first."""
        deadline = time.monotonic() + within
        for _ in range(rounds):
            seen = self._changes
            for _ in range(self.idle_turns):
                await asyncio.sleep(0)
            left = deadline - time.monotonic()
            if self._busy:  # not quiet yet: wait for the work, not beyond the bound
                if left <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._until_not_busy()
                continue
            if seen == self._changes or left <= 0:
                return

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
                # Work outside the loop (a sync step, a store call): time stands still until
                # it is done.
                await self._until_not_busy()
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
