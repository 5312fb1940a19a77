"""What a replayed step costs and gives: its recorded value, with no future made for it unless
something needs one (a timeout's block, ``wf.select``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
from collections import Counter

import pytest

import wf
import wf.testing
from wf import Engine
from wf.testing import MockClock

ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@wf.step
async def inc(x: int) -> int:
    ran["inc"] += 1
    return x + 1


@wf.step
async def pair(x: int) -> list[int]:
    ran["pair"] += 1
    return [x, x]


@wf.workflow
async def steps_then_sleep(n: int) -> int:
    x = 0
    for _ in range(n):
        x = await inc(x)
    await wf.sleep(dt.timedelta(days=1))
    return x


async def _futures_of_a_resume(engine: Engine, steps: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many futures wf's own code makes while a run of ``steps`` recorded steps resumes."""
    run = await wf.start(steps_then_sleep, steps)
    await engine.wait_driven(run)  # type: ignore[attr-defined]
    assert (await run.record()).status is wf.RunStatus.SUSPENDED
    loop = asyncio.get_running_loop()
    made = 0
    real = loop.create_future

    def counted() -> asyncio.Future[object]:
        nonlocal made
        if "/wf/" in sys._getframe(1).f_code.co_filename:
            made += 1
        return real()

    monkeypatch.setattr(loop, "create_future", counted)
    assert await run.result() == steps
    monkeypatch.undo()
    return made


@pytest.mark.parametrize("store_kind", ["local"])
async def test_a_replayed_step_makes_no_future(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten or fifty recorded steps: the resume makes as many futures either way (making,
    settling and awaiting one was 6% of a replayed step's instructions)."""
    few = await _futures_of_a_resume(wf_engine, 10, monkeypatch)
    many = await _futures_of_a_resume(wf_engine, 50, monkeypatch)
    assert ran["inc"] == 60  # each step ran once: the resumes replayed them
    assert many == few


@wf.workflow
async def replayed_every_way() -> list[object]:
    got: list[object] = [await inc(1)]
    async with wf.timeout(dt.timedelta(hours=1)):
        got.append(await inc(2))  # a block notes the futures awaited in it
    got.append(await asyncio.gather(inc(3), pair(4)))  # each in a task of its own
    got.append(await wf.select(inc(5), wf.sleep(dt.timedelta(days=2))))  # its own future
    got.append(await asyncio.create_task(inc(6)))
    await wf.sleep(dt.timedelta(days=1))
    return got


async def test_replayed_steps_give_their_recorded_values_however_awaited(
    wf_engine: Engine,
) -> None:
    run = await wf.start(replayed_every_way)
    result = await run.result()
    assert result == [2, 3, [4, [4, 4]], (0, 6), 7]
    assert ran == {"inc": 5, "pair": 1}  # recorded once, replayed after the sleep
    assert (await run.record()).resumes == 1


clocks: list[MockClock] = []


@wf.step
async def takes_two_minutes() -> str:
    clocks[0].jump(120)
    return "slow"


@wf.workflow
async def step_made_before_its_block() -> str:
    keeper = asyncio.ensure_future(wf.sleep(86400))
    call = takes_two_minutes()  # its operation is taken before the block: not the block's
    try:
        async with wf.timeout(60):
            await call
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await keeper
    return seen


async def test_a_recorded_step_awaited_in_a_block_ends_it_when_the_step_ended(
    mock_clock: MockClock,
) -> None:
    """A crash after the step's completion, before the block's end was written: the resume
    replays the step, whose recorded end (120 s in) must end the 60 s block late, as the first
    drive decided."""
    clocks[:] = [mock_clock]
    store = wf.testing.MemoryStore()
    mock_clock.autojump = False
    async with wf.testing.TestEngine(store, mock_clock, suspend_after=86400) as eng:
        with eng.installed():
            run = await wf.start(step_made_before_its_block)
            await eng.quiet()
            await eng.crash(run)
    journal = store._runs[run.id].journal
    while journal[-1]["type"] != "step_completed":
        journal.pop()  # what the crash lost
    mock_clock.jump(1000)
    mock_clock.autojump = True
    async with wf.testing.TestEngine(store, mock_clock) as again:
        with again.installed():
            assert await wf.get_run(run.id).result() == "timed out"


async def _again(call: object) -> str:
    try:
        await call  # type: ignore[misc]
    except RuntimeError as error:
        return str(error)
    return "no error"


@wf.workflow
async def awaits_twice() -> list[str]:
    call = inc(1)
    await call
    twice = await _again(call)
    other = inc(2)
    in_task = await asyncio.create_task(_twice_in_a_task(other))
    third = inc(3)
    await third
    timer = wf.sleep(60)
    try:
        await wf.select(third, timer)
        selected = "no error"
    except RuntimeError as error:
        selected = str(error)
        timer.close()  # never started: not an operation dropped by mistake
    await wf.sleep(dt.timedelta(days=1))
    return [twice, in_task, selected]


async def _twice_in_a_task(call: object) -> str:
    await call  # type: ignore[misc]
    return await _again(call)


async def test_an_operation_awaited_twice_is_refused_live_and_replayed(
    wf_engine: Engine,
) -> None:
    run = await wf.start(awaits_twice)
    reuse = "cannot reuse an already awaited wf operation"
    assert await run.result() == [reuse, reuse, reuse]  # the replay after the sleep says so too
    assert (await run.record()).resumes == 1
