"""Tasks and threads: giving up on tasks that ignore their cancellation (the one bounded wait
every stopping part of wf uses: a worker's drain and background loops, the stores' listeners,
so that no task that swallows ``CancelledError`` keeps a process from stopping), and running
long stretches of work that hold the interpreter in a thread, one at a time, and writes in a
thread that a cancellation waits out."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Collection
from typing import Any, TypeVar


async def cancel_within(tasks: Collection[asyncio.Task[Any]], timeout: float) -> set[Any]:
    """Cancel ``tasks`` and wait for them to end, at most ``timeout`` seconds: those still
    running then (they ignore their cancellation) are left so, and returned."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return set()
    _, late = await asyncio.wait(tasks, timeout=timeout)
    return late


_alone: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)

T = TypeVar("T")


async def in_thread_alone(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread, one such call of this event loop at a time.

    For work that holds the interpreter for long stretches: parsing or encoding megabytes of
    JSON happens in C, which keeps the GIL for the whole call. Ten of them at once (ten pages
    of one long run) held a server's small requests for 2 s; one at a time, the loop waits at
    most one stretch between them."""
    loop = asyncio.get_running_loop()
    gate = _alone.get(loop)
    if gate is None:
        gate = _alone[loop] = asyncio.Semaphore(1)
    async with gate:
        return await asyncio.to_thread(fn, *args)


async def in_thread_to_the_end(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread; cancelled, the caller still waits for the thread to end
    before the ``CancelledError`` leaves (a thread cannot be stopped).

    For a write done under a lock the caller holds (a schedule's flock): left to run on, it
    would land after the lock's release, on top of the next holder's write."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):  # cancelled again: wait on
                await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # seen: the cancellation is what the caller gets
        raise
