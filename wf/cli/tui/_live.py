"""Live screens: redraw whenever the store says something changed, never in a busy loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

MIN_GAP = 0.25
"""Seconds between two redraws, however often the store changes (a busy run would flood)."""


async def follow_changes(
    changed: Callable[[], Awaitable[None]], redraw: Callable[[], Awaitable[None]]
) -> None:
    """Forever: start waiting for a change, redraw, then let the wait finish.

    Watching starts *before* the read, so a change landing during the read wakes the next
    round instead of being slept through.
    """
    while True:
        change = asyncio.ensure_future(changed())
        await asyncio.sleep(0)
        await redraw()
        try:
            await asyncio.sleep(MIN_GAP)
            await change
        finally:
            change.cancel()
