"""A run's outcome is recorded only once every step it started has ended.

When a step fails a ``gather`` (or the run is cancelled, or a ``wf.timeout`` expires), the
sibling steps end first: async ones are cancelled, sync ones (threads, which cannot be
interrupted) run to their end and may poll ``wf.cancel_requested()``; then the compensations
run; then the outcome. No step of a run runs on after its outcome.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import wf
from wf import Engine
from wf.testing import MockClock

log: list[str] = []
"""What the steps did, in order (appended from threads too: ``list.append`` is atomic)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    log.clear()


@wf.step(max_retries=0)
def sync_sibling() -> str:
    log.append("sync started")
    give_up = time.monotonic() + 10
    while not wf.cancel_requested() and time.monotonic() < give_up:
        time.sleep(0.002)
    time.sleep(0.05)  # still at work after it saw the end: the outcome waits for this too
    log.append("sync ended")
    return "sync done"


@wf.step
async def async_sibling() -> str:
    log.append("async started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.01)  # its clean-up takes a moment: the outcome waits for it
        log.append("async cancelled")
        raise
    return "async done"


@wf.step
async def fails_once_siblings_run() -> None:
    async with asyncio.timeout(10):
        while not {"sync started", "async started"} <= set(log):
            await asyncio.sleep(0.001)
    raise wf.FatalError("bad")


@wf.step
def undo() -> None:
    log.append("compensated")


@wf.workflow
async def fails_beside_siblings() -> None:
    wf.rollback(undo)
    await asyncio.gather(sync_sibling(), async_sibling(), fails_once_siblings_run())


@wf.workflow
async def siblings_until_cancelled() -> None:
    wf.rollback(undo)
    await asyncio.gather(sync_sibling(), async_sibling())


@wf.workflow
async def times_out_beside_a_sync_step() -> None:
    wf.rollback(undo)
    async with wf.timeout(60):
        await asyncio.gather(sync_sibling(), wf.sleep(3600))


@wf.workflow
async def task_group_fails() -> None:
    async with asyncio.TaskGroup() as group:
        group.create_task(sync_sibling())
        group.create_task(fails_once_sync_started())


@wf.step
async def fails_once_sync_started() -> None:
    async with asyncio.timeout(10):
        while "sync started" not in log:
            await asyncio.sleep(0.001)
    raise wf.FatalError("bad")


def _index(journal: list[dict[str, Any]], type_: str, name: str | None = None) -> int:
    """Position of the first event of ``type_`` (of the step named ``name``, if given)."""
    for position, event in enumerate(journal):
        if event["type"] == type_ and (name is None or event.get("name", "").endswith(name)):
            return position
    raise AssertionError(f"no {type_} {name or ''} in {[e['type'] for e in journal]}")


async def _started(*marks: str) -> None:
    async with asyncio.timeout(10):
        while not set(marks) <= set(log):
            await asyncio.sleep(0.001)


def _assert_ended_before_outcome(journal: list[dict[str, Any]], outcome: str) -> None:
    """The sync sibling's completion and the compensation precede the outcome, the last event."""
    assert journal[-1]["type"] == outcome
    ended = _index(journal, "step_completed", "sync_sibling")
    compensated = _index(journal, "step_completed", "undo")
    assert ended < compensated < len(journal) - 1
    assert journal[ended]["result"] == "sync done"


async def test_a_failed_run_records_its_outcome_after_its_sibling_steps_end(
    wf_engine: Engine,
) -> None:
    run = await wf.start(fails_beside_siblings)
    with pytest.raises(wf.RunFailed, match="bad"):
        await run.result(timeout=30)
    # Both siblings had ended, and the compensation had run, when the outcome was recorded.
    assert log[-1] == "compensated"
    assert {"sync ended", "async cancelled"} <= set(log[:-1])
    journal = await wf_engine.store.read_journal(run.id)
    _assert_ended_before_outcome(journal, "run_failed")
    # The async sibling was cancelled by its run's end, not by a cancellation of the run.
    assert not [e for e in journal if e["type"] == "step_completed" and "async" in e["name"]]
    assert not [e for e in journal if e["type"] == "cancel_delivered"]


async def test_a_cancelled_run_records_its_outcome_after_its_sync_step_ends(
    wf_engine: Engine,
) -> None:
    run = await wf.start(siblings_until_cancelled)
    await _started("sync started", "async started")
    await run.cancel()
    with pytest.raises(wf.RunCancelled):
        await run.result(timeout=30)
    assert log[-1] == "compensated"
    assert {"sync ended", "async cancelled"} <= set(log[:-1])
    journal = await wf_engine.store.read_journal(run.id)
    _assert_ended_before_outcome(journal, "run_cancelled")


async def test_a_timed_out_run_records_its_outcome_after_its_sync_step_ends(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    mock_clock.autojump = False
    run = await wf.start(times_out_beside_a_sync_step)
    await _started("sync started")
    mock_clock.jump(61)  # the timeout expires while the sync step runs
    with pytest.raises(wf.RunFailed, match="TimeoutError"):
        await run.result(timeout=30)
    assert log == ["sync started", "sync ended", "compensated"]
    journal = await wf_engine.store.read_journal(run.id)
    _assert_ended_before_outcome(journal, "run_failed")


async def test_a_sync_step_cancelled_by_its_task_group_still_ends_before_the_outcome(
    wf_engine: Engine,
) -> None:
    run = await wf.start(task_group_fails)
    with pytest.raises(wf.RunFailed, match="TaskGroup"):
        await run.result(timeout=30)
    # The TaskGroup cancelled the sync step's call; its thread ran on, and the outcome waited.
    assert log == ["sync started", "sync ended"]
    journal = await wf_engine.store.read_journal(run.id)
    assert journal[-1]["type"] == "run_failed"
    # Its call was cancelled: its result is not recorded.
    assert not [e for e in journal if e["type"] == "step_completed"]


@wf.step
async def never_awaited() -> None:
    log.append("stray started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        log.append("stray cancelled")
        raise


@wf.workflow
async def returns_without_awaiting() -> str:
    stray = asyncio.ensure_future(never_awaited())
    await _started("stray started")
    del stray
    return "done"


async def test_a_completed_run_ends_the_steps_it_never_awaited(wf_engine: Engine) -> None:
    run = await wf.start(returns_without_awaiting)
    assert await run.result(timeout=30) == "done"
    assert log == ["stray started", "stray cancelled"]


attempts: list[int] = []


@wf.step(max_retries=0)
async def fails_on_first_attempt() -> None:
    await _started("sync started")
    attempts.append(len(attempts) + 1)
    if len(attempts) == 1:
        raise RuntimeError("first attempt")


@wf.workflow(max_attempts=2, backoff=lambda attempt: 0.0)
async def retried_beside_a_sync_step() -> str:
    done, _ = await asyncio.gather(sync_sibling(), fails_on_first_attempt())
    return str(done)


async def test_a_retried_run_ends_its_steps_before_the_next_attempt(wf_engine: Engine) -> None:
    attempts.clear()
    run = await wf.start(retried_beside_a_sync_step)
    assert await run.result(timeout=30) == "sync done"
    # The first attempt waited for the sync step, whose completion the second one replayed.
    assert log == ["sync started", "sync ended"]
    assert attempts == [1, 2]
    journal = await wf_engine.store.read_journal(run.id)
    assert _index(journal, "step_completed", "sync_sibling") < _index(journal, "run_retrying")


pool_in_use: list[Any] = []  # the engine's step threads (Engine.step_pool)


@wf.step(max_retries=0)
def queued_behind_a_busy_executor() -> None:
    log.append("queued step ran")


@wf.step(max_retries=0)
async def fails_once_the_sync_step_is_queued() -> None:
    pool = pool_in_use[0]
    async with asyncio.timeout(10):
        while pool.busy < 2:  # the blocker, then the sync step's thread hop
            await asyncio.sleep(0)
    raise wf.FatalError("bad")


@wf.workflow
async def task_group_fails_before_a_thread_starts() -> None:
    async with asyncio.TaskGroup() as group:
        group.create_task(queued_behind_a_busy_executor())
        group.create_task(fails_once_the_sync_step_is_queued())


async def test_a_sync_step_cancelled_before_its_thread_starts_never_runs_nor_holds_the_outcome(
    wf_engine: Engine,
) -> None:
    # The step threads' one thread is busy: the sync step's call is cancelled by its TaskGroup
    # while its work is still queued. That step never ran; the run's outcome waits for nothing.
    wf_engine.step_threads = 1
    pool = wf_engine.step_pool()
    pool_in_use[:] = [pool]
    busy = threading.Event()
    blocker = pool.run(lambda: busy.wait(30), "the blocker")
    try:
        run = await wf.start(task_group_fails_before_a_thread_starts)
        with pytest.raises(wf.RunFailed, match="TaskGroup"):
            await asyncio.wait_for(run.result(), 10)
    finally:
        busy.set()
        await asyncio.wait_for(blocker, 10)
    assert log == []
    journal = await wf_engine.store.read_journal(run.id)
    assert journal[-1]["type"] == "run_failed"
    assert not [e for e in journal if e["type"] == "step_completed"]
