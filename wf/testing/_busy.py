"""The store as ``TestEngine``'s engine sees it: a ``MockClock`` stands still while it works.

A store call awaited on a network store (PostgreSQL) awaits a socket, and a local store's
flush may run off the event loop: either way the loop looks idle, as it does while a sync step
runs in a thread. An auto-jumping clock that jumped then would expire a run's timers in the
middle of another run's round trips. So every call the engine awaits runs inside
``clock.busy()``, like a sync step, and so does every call on what the store hands out (leases,
slots, schedule locks). The waits for news (``wait_for_activity``, ``wait_for_run``, every
``wait_for_*``) are left out: they are how a worker or a ``result()`` is idle, and the clock
must jump while they wait.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, cast

from wf.store import Store
from wf.testing._clock import MockClock

WAITS = "wait_for_"
"""How the names begin of the store calls that wait for something to happen rather than do
work: idle time. By prefix, so a wait added to the interface under the same convention (as
``wait_for_change`` was) is idle from the start; every other coroutine call is work."""

HANDS_OUT = frozenset({"try_acquire", "claim", "try_slot", "lock_schedule"})
"""Store calls whose result (or each item of its list) is an object with calls of its own to
the store (a lease, a slot, a schedule lock): it holds the clock still too."""


class _Busy:
    """Forwards to ``target``; each coroutine method of it is awaited inside ``clock.busy()``,
    but for those whose names begin with ``waits`` (if given).

    Methods are found on each use (not cached), so a test that patches a store's class
    afterwards is still heard, and whatever a store offers beyond the interface is forwarded.
    """

    def __init__(self, target: Any, clock: MockClock, waits: str | None = None) -> None:
        self._target = target
        self._clock = clock
        self._waits = waits

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._target, name)
        waits = self._waits is not None and name.startswith(self._waits)
        if waits or not inspect.iscoroutinefunction(found):
            return found  # an attribute, a sync method, an async generator, or a wait
        return self._held(found, name in HANDS_OUT)

    def _held(
        self, method: Callable[..., Coroutine[Any, Any, Any]], hands_out: bool
    ) -> Callable[..., Coroutine[Any, Any, Any]]:
        clock = self._clock

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            with clock.busy():
                result = await method(*args, **kwargs)
            if not hands_out or result is None:
                return result
            if isinstance(result, list):
                return [_Busy(item, clock) for item in result]  # ``claim``'s leases
            return _Busy(result, clock)

        return call


class _BusyStore(_Busy):
    """``_Busy`` for a store: its waits are idle, and ``holding_schedule`` goes through the
    held ``lock_schedule`` (the store's own would call its unheld one)."""

    def __init__(self, store: Store, clock: MockClock) -> None:
        super().__init__(store, clock, WAITS)

    def holding_schedule(
        self, schedule_id: str, *, wait: bool = True
    ) -> contextlib.AbstractAsyncContextManager[bool]:
        """``Store.holding_schedule`` itself, run on this wrapper: its ``lock_schedule`` is
        the held one, so the lock is taken and given back with the clock held."""
        return Store.holding_schedule(cast(Store, self), schedule_id, wait=wait)


def busy_store(store: Store, clock: MockClock) -> Store:
    """``store`` as an engine on ``clock`` should see it: the clock stands still while a call
    the engine awaits is in flight, waits for news apart."""
    return cast(Store, _BusyStore(store, clock))
