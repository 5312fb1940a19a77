"""``RunContext.settle``: a step's completion, written pending, is made durable before anything
leaves the run; a settle cut short leaves it owed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from wf import Engine
from wf.engine._context import RunContext
from wf.store import Event, Lease, RunRecord
from wf.store.memory import MemoryStore


class _GatedLease:
    """A memory store's lease whose ``settle`` waits for the test (as a flush does), counted."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self.gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.settles = 0

    async def settle(self) -> None:
        self.settles += 1
        await asyncio.shield(self.gate)

    def append_pending(self, events: Sequence[Event]) -> bool:
        return self._lease.append_pending(events)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lease, name)


async def test_a_settle_cut_short_leaves_the_completion_owed() -> None:
    """A step whose settle was cancelled (its run cancelled) did not wait for the flush: the
    next operation's settle must wait for it again, not take the completion as durable."""
    store = MemoryStore()
    record = RunRecord(id="wrun_00000000000000000000000000", workflow="w")
    start = {"type": "run_started", "ts": 0.0, "workflow": "w", "input": None, "record": {}}
    assert await store.create_run(record, [start])
    taken = await store.try_acquire(record.id)
    assert taken is not None
    async with Engine(store) as eng:
        lease = _GatedLease(taken)
        ctx = RunContext(eng, record, lease, [start])  # type: ignore[arg-type]
        assert ctx.write_pending({"type": "step_completed", "op": 0, "name": "s", "result": 1})
        first = asyncio.ensure_future(ctx.settle())
        await asyncio.sleep(0)
        first.cancel()
        second = asyncio.ensure_future(ctx.settle())
        await asyncio.sleep(0)
        assert lease.settles == 2  # the cut-short settle left the completion owed
        lease.gate.set_result(None)
        await second
        await ctx.settle()
        assert lease.settles == 2  # settled now: nothing more to wait for
    await taken.release()
