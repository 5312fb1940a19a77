"""Live screens: redraw whenever the store says something changed, never in a busy loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from wf.admin._follow import rest_after

MIN_GAP = 0.25
"""Seconds between two redraws, however often the store changes (a busy run would flood)."""


async def follow_changes(
    changed: Callable[[], Awaitable[None]],
    redraw: Callable[[], Awaitable[None]],
    *,
    loaded: bool = False,
) -> None:
    """Forever: start waiting for a change, redraw, then let the wait finish.

    Watching starts *before* the read, so a change landing during the read wakes the next
    round instead of being slept through. Redraws keep to ``rest_after``'s share of the time.
    ``loaded``: the screen has just read what it shows, so the first round only waits (the
    local store's wait returns at once for a change since the caller's last read; any store's
    returns by its timeout).
    """
    clock = asyncio.get_running_loop().time
    while True:
        change = asyncio.ensure_future(changed())
        await asyncio.sleep(0)
        began = clock()
        if loaded:
            loaded = False
        else:
            await redraw()
        try:
            # A live run of 30,000 steps takes a while to read and draw: the screen must
            # still answer keys.
            await asyncio.sleep(max(MIN_GAP, rest_after(clock() - began)))
            await change
        finally:
            change.cancel()
