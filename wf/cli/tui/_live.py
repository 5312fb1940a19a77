"""Live screens: redraw whenever the client says something changed, never in a busy loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from textual.css.query import NoMatches

from wf.admin._follow import rest_after

MIN_GAP = 0.25
"""Seconds between two redraws, however often the runs change (a busy run would flood)."""


async def follow_changes(
    changes: Callable[[], AsyncIterator[None]],
    redraw: Callable[[], Awaitable[None]],
    *,
    timeout: float,
    loaded: bool = False,
) -> None:
    """Forever: redraw, then wait for the next change (``changes()``: the client's feed,
    ``Admin.changes``) or ``timeout`` seconds, whichever comes first.

    The feed is followed from the start, and what it says is kept until the next wait, so a
    change landing during a read wakes the next round instead of being slept through. Redraws
    keep to ``rest_after``'s share of the time. ``loaded``: the screen has just read what it
    shows, so the first round only waits. A feed that fails or ends (a server restarted, the
    run deleted) leaves the timeout, and is opened again ``timeout`` seconds later; the next
    read shows what became of the runs. A redraw that finds the screen's widgets gone (the
    app closing while it read) ends the following.
    """
    clock = asyncio.get_running_loop().time
    changed = asyncio.Event()

    async def pump() -> None:
        while True:
            with contextlib.suppress(Exception):
                async for _ in changes():
                    changed.set()
            await asyncio.sleep(timeout)

    pumping = asyncio.ensure_future(pump())
    try:
        while True:
            changed.clear()
            began = clock()
            if loaded:
                loaded = False
            else:
                try:
                    await redraw()
                except NoMatches:
                    return  # the screen's widgets are gone: the app is closing under it
            # A live run of 30,000 steps takes a while to read and draw: the screen must
            # still answer keys.
            await asyncio.sleep(max(MIN_GAP, rest_after(clock() - began)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await changed.wait()
    finally:
        pumping.cancel()
