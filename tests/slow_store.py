"""A memory store whose every call takes real time, as a network store's round trips do.

The memory store answers without giving the event loop a turn, so on it the loop is idle only
when every run waits. A network store's round trip awaits a socket: the loop looks idle while
the store works. ``slow_store()`` makes that happen on any machine, without PostgreSQL (for the
fake clock's auto-jump, ``tests/testing/test_clock.py``, and a run's suspension,
``tests/engine/test_wakeups.py``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any, cast

from wf.store import Lease, Store
from wf.store.memory import MemoryStore

ROUND_TRIP = 0.005
"""Real seconds each store call takes: several times what the clock waits before it jumps."""


class _Slow:
    """Forwards to ``target``; each awaited call first waits ``ROUND_TRIP`` real seconds, and
    the leases it hands out are as slow. The waits for news (``wait_for_*``) are left alone:
    they take as long as nothing happens."""

    def __init__(self, target: object) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._target, name)
        if name.startswith("wait_for_") or not inspect.iscoroutinefunction(found):
            return found
        return self._slowed(found)

    @staticmethod
    def _slowed(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(ROUND_TRIP)
            result = await method(*args, **kwargs)
            if isinstance(result, Lease):
                return _Slow(result)
            if isinstance(result, list) and result and isinstance(result[0], Lease):
                return [_Slow(lease) for lease in result]  # ``claim``'s
            return result

        return call


def slow_store() -> Store:
    """A fresh memory store whose every round trip takes ``ROUND_TRIP`` of real time."""
    return cast(Store, _Slow(MemoryStore()))
