"""Giving up on tasks that ignore their cancellation: the one bounded wait every stopping part
of wf uses (a worker's drain and background loops, the stores' listeners), so that no task that
swallows ``CancelledError`` keeps a process from stopping."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any


async def cancel_within(tasks: Collection[asyncio.Task[Any]], timeout: float) -> set[Any]:
    """Cancel ``tasks`` and wait for them to end, at most ``timeout`` seconds: those still
    running then (they ignore their cancellation) are left so, and returned."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return set()
    _, late = await asyncio.wait(tasks, timeout=timeout)
    return late
