"""The reference in-memory store against the conformance kit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.store.helpers import record
from wf.store import Store
from wf.store.conformance import FAR, StoreConformance
from wf.store.memory import MemoryStore


class TestMemoryStore(StoreConformance):
    """``MemoryStore`` lives in one object: its peer is itself."""

    async def make_store(self, tmp_path: Path) -> Store:
        return MemoryStore()


async def test_a_wait_cancelled_as_it_is_woken_ends_cancelled() -> None:
    """A Ctrl-C or a worker's stop in the same moment as the change that woke a wait still
    cancels it: a wait that returned instead would leave its caller's loop waiting on."""
    store = MemoryStore()
    run = record()
    await store.create_run(run)
    await store.due_runs(FAR)
    for_run = asyncio.ensure_future(store.wait_for_run(run.id, 10.0))
    for_activity = asyncio.ensure_future(store.wait_for_activity(10.0))
    await asyncio.sleep(0)
    await store.post(run.id, "wake", {})  # wakes both, without yielding to the loop
    assert for_run.cancel() and for_activity.cancel()  # neither has returned yet
    for waiter in (for_run, for_activity):
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(5.0):
                await waiter
