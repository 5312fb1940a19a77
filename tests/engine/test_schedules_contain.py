"""One schedule's fault stays with it: a slow or hung import of its workflow's module, another
process firing it, a fire that fails each time; and many schedules due at once."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import wf
from wf import Engine, Worker
from wf.engine._firing import BUSY_RETRY, RETRY_MAX, Firing
from wf.engine._schedules import fire_due, fire_run_id
from wf.engine._workflow import _registry
from wf.store import Schedule
from wf.testing import MockClock

MIN = 60.0
MODULE = "tests.engine.slow_scheduled"


@wf.workflow
async def tick(n: int = 0) -> int:
    return n


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``tests.engine.slow_scheduled`` not imported yet, its import (after it declares its
    workflow) waiting for the gate; a fire waits for it 10 ms (``IMPORT_WAIT``) before leaving
    the schedule for later."""
    from tests.serve._gate import GATE, TIMED_OUT

    monkeypatch.setattr("wf.engine._firing.IMPORT_WAIT", 0.01)
    GATE.clear()
    TIMED_OUT.clear()
    yield GATE
    GATE.set()
    if MODULE in sys.modules:
        importlib.import_module(MODULE)  # waits for the import the test left going to end
    sys.modules.pop(MODULE, None)
    _registry.pop(f"{MODULE}:slow_scheduled", None)


async def due_schedules(engine: Engine) -> None:
    """``good`` (a declared workflow) and ``slow`` (a workflow whose module is slow to import),
    both due now."""
    now = engine.clock.now()
    await wf.schedule("good", tick, cron="* * * * *", allow_overlap=True)
    await engine.store.save_schedule(
        Schedule(
            "slow",
            f"{MODULE}:slow_scheduled",
            "* * * * *",
            target=f"{MODULE}:slow_scheduled",
            next_run=now,
        )
    )
    good = await engine.store.get_schedule("good")
    assert good is not None
    good.next_run = now
    await engine.store.save_schedule(good)


async def runs_of(engine: Engine, schedule_id: str) -> list[str]:
    return [r.id for r in await engine.store.list_runs() if r.schedule_id == schedule_id]


@pytest.mark.stores("memory", "local")
async def test_a_schedule_whose_module_is_still_importing_waits_alone(
    wf_engine: Engine, mock_clock: MockClock, gate: Any
) -> None:
    await due_schedules(wf_engine)
    now = mock_clock.now()
    firing = Firing()
    began = time.monotonic()
    async with asyncio.timeout(10):
        earliest = await fire_due(wf_engine, firing=firing)
    assert time.monotonic() - began < 3  # the import waits up to 5 s for the gate
    assert await runs_of(wf_engine, "good") == [fire_run_id("good", now)]
    assert await runs_of(wf_engine, "slow") == []
    assert earliest == now + BUSY_RETRY  # looked at again soon, not at once
    slow = await wf_engine.store.get_schedule("slow")
    assert slow is not None and slow.next_run == now  # still due: not skipped
    assert slow.last_error is not None and "still importing after" in slow.last_error
    mock_clock.jump(BUSY_RETRY)  # declared by now, but its module is not all there yet
    async with asyncio.timeout(10):
        assert await fire_due(wf_engine, firing=firing) == mock_clock.now() + 2 * BUSY_RETRY
    assert await runs_of(wf_engine, "slow") == []

    gate.set()  # the import ends: a later look fires it
    async with asyncio.timeout(10):
        while not await runs_of(wf_engine, "slow"):
            mock_clock.jump(RETRY_MAX)
            await fire_due(wf_engine, firing=firing)
            await asyncio.sleep(0.01)
    assert await runs_of(wf_engine, "slow") == [fire_run_id("slow", now)]
    slow = await wf_engine.store.get_schedule("slow")
    assert slow is not None and slow.last_error is None and slow.last_run_id is not None


@pytest.mark.stores("memory", "local")
async def test_a_worker_with_a_hung_import_still_delivers_and_stops_at_once(
    wf_engine: Engine, mock_clock: MockClock, gate: Any
) -> None:
    await due_schedules(wf_engine)
    worker = Worker(wf_engine, retention=False)
    task = asyncio.ensure_future(worker.run())
    try:
        async with asyncio.timeout(3):  # the import waits up to 5 s for the gate
            run = await wf.start(tick, 7, detach=True)
            assert await run.result() == 7
            while not await runs_of(wf_engine, "good"):
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        began = time.monotonic()
        await asyncio.wait_for(task, 10)
    assert time.monotonic() - began < 2
    assert await runs_of(wf_engine, "slow") == []


@pytest.mark.stores("memory", "local")
async def test_a_schedule_another_process_fires_is_looked_at_less_and_less_often(
    wf_engine: Engine, mock_clock: MockClock
) -> None:
    await wf.schedule("held", tick, cron="* * * * *")
    mock_clock.jump(MIN)
    firing = Firing()
    looks: list[float] = []
    async with wf_engine.store.holding_schedule("held"):  # as another process would
        for _ in range(12):
            now = mock_clock.now()
            earliest = await fire_due(wf_engine, firing=firing)
            assert earliest is not None
            looks.append(earliest - now)
            mock_clock.jump(earliest - now)
    assert looks[:3] == pytest.approx([BUSY_RETRY, 2 * BUSY_RETRY, 4 * BUSY_RETRY])
    assert looks[-1] == RETRY_MAX
    await fire_due(wf_engine, firing=firing)  # let go: it fires
    assert len(await wf_engine.store.list_runs()) == 1


@pytest.mark.stores("memory")
async def test_a_fire_that_fails_each_time_is_logged_once_an_hour(
    wf_engine: Engine, mock_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    await wf_engine.store.save_schedule(
        Schedule("gone", "nowhere:gone", "* * * * *", next_run=mock_clock.now())
    )
    firing = Firing()
    with caplog.at_level(logging.ERROR, logger="wf.schedules"):
        for _ in range(90):  # an hour and a half of fires, a minute apart
            await fire_due(wf_engine, firing=firing)
            mock_clock.jump(MIN)
    said = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(said) == 2  # at once, then an hour later
    # A worker's log line says its moment in ISO 8601, UTC (docs/cli.md, "Times"), not as
    # epoch seconds.
    assert (
        said[0]
        .getMessage()
        .startswith("schedule gone: the fire of 2027-01-15T08:00:00+00:00 failed: ")
    ), said[0].getMessage()
    found = await wf_engine.store.get_schedule("gone")
    assert found is not None and found.skipped == 90
    assert found.last_error is not None and "nowhere:gone" in found.last_error


@pytest.mark.stores("memory", "local")
async def test_many_due_schedules_fire_a_few_at_a_time(
    wf_engine: Engine, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(30):
        await wf.schedule(f"s{i}", tick, cron="* * * * *", allow_overlap=True)
    mock_clock.jump(MIN)
    store = wf_engine.store
    original = store.get_schedule
    going = [0]
    most = [0]

    async def counted(schedule_id: str) -> Schedule | None:
        going[0] += 1
        most[0] = max(most[0], going[0])
        try:
            await asyncio.sleep(0)
            return await original(schedule_id)
        finally:
            going[0] -= 1

    monkeypatch.setattr(store, "get_schedule", counted)
    await fire_due(wf_engine)
    assert len(await store.list_runs()) == 30
    assert 1 < most[0] <= 8  # FIRE_CONCURRENCY


@wf.workflow
async def ticked() -> int:
    return 1


@pytest.mark.stores("memory", "local")
async def test_a_store_blip_while_a_fire_starts_its_run_leaves_the_fire_due(
    wf_engine: Engine, mock_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = mock_clock.now()
    await wf_engine.store.save_schedule(Schedule("blip", ticked.name, "0 0 * * *", next_run=now))
    real = wf_engine.start
    calls: list[int] = []

    async def blips_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise wf.StoreUnavailable("connection dropped")
        return await real(*args, **kwargs)

    monkeypatch.setattr(wf_engine, "start", blips_once)
    with pytest.raises(wf.StoreUnavailable):  # the worker's outage handling waits it out
        await fire_due(wf_engine, firing=Firing())
    kept = await wf_engine.store.get_schedule("blip")
    assert kept is not None and (kept.next_run, kept.skipped) == (now, 0)  # not lost
    await fire_due(wf_engine, firing=Firing())
    assert await runs_of(wf_engine, "blip") == [fire_run_id("blip", now)]


@pytest.mark.stores("memory", "local")
async def test_a_fire_waits_only_so_long_for_an_import_another_thread_began(
    wf_engine: Engine, mock_clock: MockClock, gate: Any
) -> None:
    # A run's driver (another thread) is importing the module; its workflow is declared, the
    # rest of the module not there yet.
    importing = asyncio.ensure_future(asyncio.to_thread(importlib.import_module, MODULE))
    async with asyncio.timeout(10):
        while f"{MODULE}:slow_scheduled" not in _registry:
            await asyncio.sleep(0.01)
    await due_schedules(wf_engine)
    firing = Firing()
    began = time.monotonic()
    async with asyncio.timeout(10):
        await fire_due(wf_engine, firing=firing)
    assert time.monotonic() - began < 3  # the import waits up to 5 s for the gate
    assert await runs_of(wf_engine, "slow") == []
    assert len(await runs_of(wf_engine, "good")) == 1
    gate.set()
    await importing
    for _, loading, _ in firing._loading.values():  # the fire's own import thread ends too,
        await asyncio.wait([loading])  # before the next test imports the module afresh


def test_a_schedule_whose_catch_up_wf_does_not_know_is_damaged() -> None:
    """A stored ``catch_up: "sometimes"`` was fired as ``"none"``, silently: the schedule is
    damaged (skipped, and named where it is read), as ``wf.schedule`` refuses the value."""
    stored = {"id": "tick", "workflow": "pkg:flow", "cron": "* * * * *"}
    for known in ("one", "none", "all"):
        assert Schedule.from_json({**stored, "catch_up": known}).catch_up == known
    with pytest.raises(ValueError, match="'catch_up' is 'sometimes', not one of one, none, all"):
        Schedule.from_json({**stored, "catch_up": "sometimes"})
