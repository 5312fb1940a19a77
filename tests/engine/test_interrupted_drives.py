"""A drive its process ended on purpose (its task cancelled: ``Engine.aclose`` on Ctrl-C or
SIGTERM of ``wf run``, ``asyncio.run`` cancelling what a program left running as it returns) is
no death of its run: it notes so in the journal (``drive_failed``, ``reason`` ``interrupted``)
before the process goes on ending, within ``INTERRUPTED_NOTE_WAIT``. A crash
(``TestEngine.crash``, as a SIGKILL) still counts, and the deaths around interruptions add up.
Each engine stands for a process of its own; real processes and signals:
``tests/cli/test_interrupted_drives.py``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

import wf
from tests.engine.test_stalled import _reset, die_in_step, hang, hanging, passes
from wf.engine import _driver
from wf.store import RunStatus
from wf.store.memory import MemoryStore, _MemoryLease
from wf.testing import MockClock, TestEngine

_ = _reset  # its autouse: each test begins with no step let through


@wf.workflow(max_recoveries=2)
async def one_step() -> int:
    return await hang(5)


async def interrupt_in_step(engine: TestEngine, run_id: str) -> None:
    """Drive the run until it is in ``hang(5)``, then cancel the drive, as the engine's
    ``aclose`` (or ``asyncio.run``'s end) does."""
    hanging.pop(5, None)
    reached = hanging.setdefault(5, asyncio.Event())
    driver = engine.drive_soon(run_id)
    await asyncio.wait_for(reached.wait(), 10)
    driver.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driver


def kinds(journal: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in journal]


async def test_drives_cancelled_again_and_again_are_no_deaths(wf_engine: TestEngine) -> None:
    run = await wf.start(one_step, detach=True)
    for _ in range(5):  # past max_recoveries=2
        await interrupt_in_step(wf_engine, run.id)
        assert (await run.record()).status is RunStatus.RUNNING  # left due
    passes.add(5)
    await wf_engine.drive_soon(run.id)
    assert await run.result() == 5
    journal = await wf_engine.store.read_journal(run.id)
    notes = [e for e in journal if e["type"] == "drive_failed"]
    assert [n.get("reason") for n in notes] == ["interrupted"] * 5
    assert all(e.get("recoveries") is None for e in journal if e["type"] == "run_resumed")


async def test_the_first_drive_in_the_process_that_started_the_run_is_noted_too(
    wf_engine: TestEngine,
) -> None:
    """``await wf.start(...)`` drives it here at once, without a marker (``_recovery``)."""
    reached = hanging.setdefault(5, asyncio.Event())
    run = await wf.start(one_step)
    await asyncio.wait_for(reached.wait(), 10)
    driver = wf_engine.drivers[run.id]
    driver.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driver
    journal = await wf_engine.store.read_journal(run.id)
    assert kinds(journal) == ["run_started", "step_started", "drive_failed"]
    assert journal[-1]["began"] == 1 and "drive" not in journal[-1]


async def test_crashes_around_interruptions_still_fail_the_run_stalled(
    wf_engine: TestEngine,
) -> None:
    run = await wf.start(one_step, detach=True)
    assert await die_in_step(wf_engine, run.id, 5) is None  # death 1
    for _ in range(3):
        await interrupt_in_step(wf_engine, run.id)
    assert await die_in_step(wf_engine, run.id, 5) is None  # death 2: the limit
    ended = await die_in_step(wf_engine, run.id, 5)
    assert ended is not None and ended.status is RunStatus.FAILED
    assert (ended.error or {}).get("type") == "wf.RunStalled"
    assert "died 2 times in a row in step 'hang'" in (ended.error or {})["message"]


async def test_an_interrupted_drive_is_said_as_no_death(
    wf_engine: TestEngine, caplog: pytest.LogCaptureFixture
) -> None:
    run = await wf.start(one_step, detach=True)
    await interrupt_in_step(wf_engine, run.id)
    passes.add(5)
    with caplog.at_level("WARNING", logger="wf"):
        await wf_engine.drive_soon(run.id)
    assert await run.result() == 5
    assert not [r for r in caplog.records if "died" in r.getMessage()]


@pytest.fixture
def stuck_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """The memory store's appends of notes hang while ``stuck[0]``; the bound is short."""
    stuck = [False]
    real = _MemoryLease.append

    async def append(self: _MemoryLease, events: Any) -> None:
        if stuck[0] and any(e.get("type") == "drive_failed" for e in events):
            await asyncio.Event().wait()
        await real(self, events)

    monkeypatch.setattr(_MemoryLease, "append", append)
    monkeypatch.setattr(_driver, "INTERRUPTED_NOTE_WAIT", 0.2)
    yield stuck


async def test_a_store_that_cannot_take_the_note_in_time_does_not_hold_up_the_end(
    stuck_store: list[bool],
) -> None:
    """The interruption ends within the bound, unnoted: the next process counts it."""
    store = MemoryStore()
    async with TestEngine(store, MockClock()) as engine:
        run = await wf.start(one_step.with_options(max_recoveries=1), detach=True)
        stuck_store[0] = True
        began = time.monotonic()
        await interrupt_in_step(engine, run.id)
        assert time.monotonic() - began < 5
        stuck_store[0] = False
    assert "drive_failed" not in kinds(await store.read_journal(run.id))
    passes.add(5)
    async with TestEngine(store, MockClock()) as engine:
        ended = await engine.drive_soon(run.id)
    assert ended is not None and (ended.error or {}).get("type") == "wf.RunStalled", ended


@wf.step
async def first() -> int:
    return 1


@wf.workflow(max_recoveries=2)
async def cancels_itself() -> int:
    """Cancels its own task after a step: its code ends the drive, not its process."""
    await first()
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    return await first()


async def test_a_workflow_that_cancels_its_own_task_still_fails_stalled(
    wf_engine: TestEngine,
) -> None:
    """The drive's own task was never cancelled: no interruption, a death each time (it
    had looped for ever, noting one interruption after another)."""
    run = await wf.start(cancels_itself, detach=True)
    ended = None
    for _ in range(5):  # max_recoveries=2: it fails at the third drive at the latest
        driver = wf_engine.drive_soon(run.id)
        await asyncio.wait([driver], timeout=10)
        assert driver.done()
        if not driver.cancelled() and driver.exception() is None:
            ended = driver.result()
            if ended is not None and ended.status.is_terminal:
                break
    journal = await wf_engine.store.read_journal(run.id)
    assert "interrupted" not in [e.get("reason") for e in journal]
    assert ended is not None and (ended.error or {}).get("type") == "wf.RunStalled", ended
