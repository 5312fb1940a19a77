"""Test kit for wf users: a fake clock that sleeps for days instantly, an in-memory store, and an
engine that uses both.

    async def test_order():
        async with wf.testing.engine() as eng:
            run = await wf.start(order, 3)
            assert await run.result() == "shipped"
            eng.clock.jump(0)  # time is fake: await wf.sleep(days) returns at once

The pytest plugin (``wf.testing.pytest_plugin``, loaded automatically) provides the fixtures
``wf_engine`` (memory store + MockClock, installed as current) and ``mock_clock``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from wf.engine._engine import Engine, use_engine
from wf.store import Store
from wf.store.memory import MemoryStore
from wf.testing._clock import MockClock

__all__ = ["MemoryStore", "MockClock", "engine"]


@contextlib.asynccontextmanager
async def engine(
    store: Store | None = None,
    clock: MockClock | None = None,
    *,
    suspend_after: float = 30.0,
) -> AsyncIterator[Engine]:
    """An engine on ``store`` (default: a fresh ``MemoryStore``) and a ``MockClock``, current
    within the block; runs still driven at the end are cancelled."""
    eng = Engine(store or MemoryStore(), clock or MockClock(), suspend_after=suspend_after)
    with use_engine(eng):
        try:
            yield eng
        finally:
            for task in list(eng.drivers.values()):
                task.cancel()
            for task in list(eng.drivers.values()):
                with contextlib.suppress(BaseException):
                    await task
