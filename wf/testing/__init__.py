"""Test kit for wf users: an engine on a fake clock that sleeps for days instantly, an in-memory
store, crashes on demand, and pytest fixtures.

    async def test_order():
        async with wf.testing.TestEngine() as eng:
            run = await wf.start(order, 3)
            await eng.crash(run)       # the driving process "dies" mid-run
            await eng.settle()         # a worker delivers everything due
            assert await run.result() == "shipped"

Time is fake: ``await wf.sleep(days)`` returns as soon as nothing else can happen
(``MockClock`` jumps, as trio's does; never while a sync step runs in its thread or a store
call is in flight), and ``eng.mock_clock.jump(seconds)`` moves it by hand.

The pytest plugin (``wf.testing.pytest_plugin``, loaded automatically) provides the fixtures
``wf_engine`` (a ``TestEngine`` on a memory store, current for the test) and ``mock_clock``. They
need no pytest-asyncio configuration: an ``async def`` test that uses them and that no other
plugin runs is run by wf's plugin on a fresh event loop.

``await wf.testing.replay("tests/journals/order-1.jsonl")`` replays a run exported with
``wf inspect RUN_ID --journal`` against the current code (``wf.NondeterminismError`` if it
diverges).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.store import Store
    from wf.store.memory import MemoryStore
    from wf.testing._clock import MockClock
    from wf.testing._engine import TestEngine
    from wf.testing._replay import replay

__all__ = ["MemoryStore", "MockClock", "TestEngine", "engine", "replay"]

_EXPORTS = {
    "MemoryStore": "wf.store.memory",
    "MockClock": "wf.testing._clock",
    "TestEngine": "wf.testing._engine",
    "replay": "wf.testing._replay",
}
"""Imported on first use, as ``wf``'s names are: pytest loads ``wf.testing.pytest_plugin``, and
so this package, in every session where wf is installed."""


# Hidden from type checkers, which see the imports above (``wf._lazy``).
if not TYPE_CHECKING:
    from wf._lazy import lazy_names

    __getattr__, __dir__ = lazy_names(globals(), _EXPORTS)


@contextlib.asynccontextmanager
async def engine(
    store: Store | None = None,
    clock: MockClock | None = None,
    *,
    suspend_after: float = 30.0,
) -> AsyncIterator[TestEngine]:
    """A ``TestEngine`` on ``store`` (default: a fresh ``MemoryStore``) and a ``MockClock``,
    current within the block; runs still driven at the end are abandoned."""
    from wf.testing._engine import TestEngine

    async with TestEngine(store, clock, suspend_after=suspend_after) as eng:
        yield eng
