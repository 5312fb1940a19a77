"""A suspect run (its drivers died in it twice in a row) is driven alone (``wf.engine._alone``):
the process's other drives wait while its code runs, never while it only waits. Deaths are
simulated as in ``test_stalled``; time is the fake clock's."""

from __future__ import annotations

import pytest

import wf
from tests.engine.test_stalled import _reset, die_in_step, hang, passes, plain
from wf.store import RunStatus
from wf.testing import TestEngine

_ = _reset  # its autouse: each test begins with no step let through


@wf.workflow(max_recoveries=5)
async def sleeps_after_dying(n: int) -> int:
    await hang(2)
    for _ in range(n):
        await wf.sleep(1)  # a short timer: an ordinary drive holds on to it
    return n


@pytest.mark.timeout(60)
async def test_a_suspect_that_sleeps_in_a_loop_does_not_hold_up_the_other_runs(
    wf_engine: TestEngine,
) -> None:
    suspect = await wf.start(sleeps_after_dying, 3, detach=True)
    assert await die_in_step(wf_engine, suspect.id, 2) is None
    assert await die_in_step(wf_engine, suspect.id, 2) is None
    passes.update({2, 7})
    wf_engine.drive_soon(suspect.id)  # alone now: it passes hang(2) and reaches its first sleep
    await wf_engine.quiet()
    began = wf_engine.clock.now()

    other = await wf.start(plain, detach=True)
    wf_engine.drive_soon(other.id)
    await wf_engine.quiet()
    # Before the clock moved at all: it did not wait behind the suspect's timer (an ordinary
    # drive holds on to a timer up to ``suspend_after``, 30 s here, each time).
    record = await wf_engine.store.get_run(other.id)
    assert record.status is RunStatus.COMPLETED
    assert wf_engine.clock.now() == began

    # The suspect suspended at its first wait, however short; it is no longer driven alone.
    await wf_engine.wait_driven(suspect.id)
    ended = await wf_engine.store.get_run(suspect.id)
    assert ended.status is RunStatus.SUSPENDED
    assert ended.wake_at == began + 1
    assert not wf_engine.drive_gate._alone
    await wf_engine.settle()
    assert await suspect.result() == 3
