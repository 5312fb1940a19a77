"""``wf.first`` against a sleep inside a ``wf.timeout`` block, on a drive that comes after both
the sleep's end and the block's deadline: the sleep ended first by the durable clock, so it
wins and the block ended in time, as on a drive that was live all along."""

from __future__ import annotations

import pytest

import wf
from tests.engine.test_compose import block_races_a_hook as races
from wf.testing import MockClock


@pytest.mark.parametrize(
    ("seconds", "payload_at", "seen"),
    [
        (45.0, None, "in time (None)"),  # was: timed out (the deadline fired first)
        (45.0, 100.0, "in time (None)"),  # was: timed out (the lost payload ended the block)
        (120.0, None, "timed out"),
        (120.0, 100.0, "timed out"),
        (120.0, 10.0, "in time (p)"),
    ],
)
async def test_a_select_in_a_block_resumed_late_is_decided_by_the_durable_clock(
    mock_clock: MockClock, seconds: float, payload_at: float | None, seen: str
) -> None:
    store = wf.testing.MemoryStore()
    mock_clock.autojump = False
    async with wf.testing.TestEngine(store, mock_clock) as engine:
        with engine.installed():
            run = await wf.start(races, "tok", seconds)
            assert (await run.settle(timeout=30)).status == wf.RunStatus.SUSPENDED
            if payload_at is not None:
                mock_clock.jump(payload_at)
                await wf.resume_hook("tok", "p")
            await engine.crash(run)  # no driver until long after the sleep and the deadline
    mock_clock.jump(1000)
    mock_clock.autojump = True
    async with wf.testing.TestEngine(store, mock_clock) as engine:
        with engine.installed():
            assert await wf.get_run(run.id).result() == seen


@pytest.mark.parametrize(("seconds", "seen"), [(45.0, "in time (None)"), (120.0, "timed out")])
async def test_a_live_drive_decides_the_same(
    mock_clock: MockClock, seconds: float, seen: str
) -> None:
    async with wf.testing.TestEngine(wf.testing.MemoryStore(), mock_clock) as engine:
        with engine.installed():
            run = await wf.start(races, "tok", seconds)
            assert await run.result() == seen
