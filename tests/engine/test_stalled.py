"""Stalled runs on every store: a driver that dies in a step (here ``TestEngine.crash`` mid-step,
which leaves the journal as a killed process would) is counted by the next one; after
``max_recoveries`` deaths in a row without progress the run fails with ``wf.RunStalled``, never
retried. The same with real processes: ``tests/reliability/test_stalled.py``."""

from __future__ import annotations

import asyncio

import pytest

import wf
from wf import Engine
from wf.store import RunRecord, RunStatus
from wf.store.memory import MemoryStore
from wf.testing import TestEngine

hanging: dict[int, asyncio.Event] = {}
"""Index -> set once ``hang(index)`` is running."""
passes: set[int] = set()
"""Indexes ``hang`` returns at once for."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    hanging.clear()
    passes.clear()


@wf.step
async def prepare() -> str:
    return "ready"


@wf.step
async def hang(index: int) -> int:
    if index in passes:
        return index
    hanging.setdefault(index, asyncio.Event()).set()
    await asyncio.Event().wait()  # until its driver "dies"
    return index


@wf.workflow(max_recoveries=2, max_attempts=3)
async def stuck() -> int:
    await prepare()
    return await hang(1)


@wf.workflow(max_recoveries=2)
async def moving(n: int) -> list[int]:
    return [await hang(i) for i in range(n)]


@wf.workflow
async def plain() -> int:
    return await hang(7)


async def die_in_step(engine: Engine, run_id: str, index: int) -> RunRecord | None:
    """Drive the run until it is in ``hang(index)``, then let the driver die there, as a
    SIGKILL would (``TestEngine.crash``: a drive merely cancelled is one its process ended on
    purpose, noted as no death); the record if the drive ended first (the run failed
    stalled)."""
    assert isinstance(engine, TestEngine)
    hanging.pop(index, None)
    reached = hanging.setdefault(index, asyncio.Event())
    driver = engine.drive_soon(run_id)
    waiter = asyncio.ensure_future(reached.wait())
    await asyncio.wait([driver, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if driver.done():
        return await driver
    await engine.crash(run_id)
    assert driver.done()
    return None


async def test_a_run_that_dies_in_a_step_fails_stalled(wf_engine: Engine) -> None:
    run = await wf.start(stuck, detach=True)
    # The first death comes after ``prepare`` was recorded: it made progress, it is not counted.
    deaths = 0
    while (ended := await die_in_step(wf_engine, run.id, 1)) is None:
        deaths += 1
        assert deaths <= 3
    assert deaths == 3
    assert ended.status is RunStatus.FAILED
    with pytest.raises(wf.RunFailed) as caught:
        await run.result()
    stalled = caught.value.original
    assert isinstance(stalled, wf.RunStalled)
    assert stalled.recoveries == 2
    assert stalled.steps == [{"op": 1, "name": "hang"}] * 2
    assert str(stalled) == (
        f"run {run.id} stalled: its driving process died 2 times in a row in step 'hang' "
        "(op 1) without recording progress"
    )
    # Not retried (max_attempts=3 is for the run's own failures): it stays failed.
    assert await wf_engine.drive_soon(run.id) is not None
    assert (await run.record()).attempt == 1
    journal = await wf_engine.store.read_journal(run.id)
    assert [e["type"] for e in journal].count("run_failed") == 1
    assert [e.get("recoveries") for e in journal if e["type"] == "run_resumed"] == [None, 1]


@wf.workflow(max_recoveries=2)
async def waits_in_its_code() -> int:
    hanging.setdefault(99, asyncio.Event()).set()
    await asyncio.Event().wait()  # not a step: its driver "dies" in the workflow's own code
    return 0


async def test_a_run_that_dies_in_its_own_code_fails_stalled(wf_engine: Engine) -> None:
    run = await wf.start(waits_in_its_code, detach=True)
    deaths = 0
    while (ended := await die_in_step(wf_engine, run.id, 99)) is None:
        deaths += 1
        assert deaths <= 2
    assert (deaths, ended.status) == (2, RunStatus.FAILED)
    with pytest.raises(wf.RunFailed) as caught:
        await run.result()
    stalled = caught.value.original
    assert isinstance(stalled, wf.RunStalled) and stalled.steps == []
    assert str(stalled) == (
        f"run {run.id} stalled: its driving process died 2 times in a row without recording "
        "progress"
    )


async def test_a_run_that_progresses_between_deaths_is_never_stalled(wf_engine: Engine) -> None:
    run = await wf.start(moving, 4, detach=True)
    for index in range(4):
        assert await die_in_step(wf_engine, run.id, index) is None
        passes.add(index)  # from now on it completes: the next driver gets further
    assert await wf_engine.drive_soon(run.id) is not None
    assert await run.result() == [0, 1, 2, 3]


async def test_with_options_and_the_engine_set_the_limit(wf_engine: Engine) -> None:
    once = await wf.start(stuck.with_options(max_recoveries=1), detach=True)
    assert await die_in_step(wf_engine, once.id, 1) is None  # after progress: not counted
    assert await die_in_step(wf_engine, once.id, 1) is None
    ended = await die_in_step(wf_engine, once.id, 1)
    assert ended is not None and ended.status is RunStatus.FAILED

    wf_engine.max_recoveries = 1  # the engine's (``[tool.wf] max_recoveries``): no own limit
    run = await wf.start(plain, detach=True)
    assert await die_in_step(wf_engine, run.id, 7) is None  # the first drive: no progress
    ended = await die_in_step(wf_engine, run.id, 7)
    assert ended is not None and ended.status is RunStatus.FAILED
    assert "died 1 time in a row in step 'hang' (op 0)" in (ended.error or {})["message"]


def test_max_recoveries_is_a_positive_integer() -> None:
    with pytest.raises(wf.UsageError, match="max_recoveries"):
        wf.workflow(max_recoveries=0)(moving.fn)
    with pytest.raises(wf.UsageError, match="max_recoveries"):
        moving.with_options(max_recoveries="3")
    for wrong in (-1, 0):  # -1 failed every run stalled at its first claim ("died 0 times")
        with pytest.raises(wf.UsageError, match="max_recoveries"):
            Engine(MemoryStore(), max_recoveries=wrong)


async def stall(engine: Engine) -> str:
    """A run of ``stuck`` whose drivers died in ``hang`` until it failed stalled (for the
    front ends' tests): three deaths, one recovery recorded, then the stalled failure."""
    # Called from other modules, whose tests this module's autouse reset does not cover: a
    # ``passes`` left by a test here (same xdist worker) would let ``hang`` return at once.
    hanging.clear()
    passes.clear()
    run = await wf.start(stuck, detach=True)
    for _ in range(4):
        if await die_in_step(engine, run.id, 1) is not None:
            return run.id
    raise AssertionError("the run did not stall")


async def test_a_run_started_by_name_takes_the_declared_limit_or_its_own(
    wf_engine: Engine,
) -> None:
    own = await wf.start(wf.ref(stuck.name).with_options(max_recoveries=1), detach=True)
    assert (await own.record()).max_recoveries == 1
    run = await wf.start(wf.ref(stuck.name), detach=True)
    assert (await run.record()).max_recoveries is None  # not known until a driver adopts it
    deaths = 0
    while (ended := await die_in_step(wf_engine, run.id, 1)) is None:
        deaths += 1
        assert deaths <= 3
    assert (deaths, ended.max_recoveries) == (3, 2)  # the declaration's, as a declared start
    assert "died 2 times in a row" in (ended.error or {})["message"]
