"""``MockClock``'s auto-jump on a store whose operations take real time, as PostgreSQL's do.

The memory store answers without giving the event loop a turn, so on it the loop is idle only
when every run waits. A network store's round trip awaits a socket: the loop looks idle, and a
clock that jumped then would expire a run's timers while another run (or the same one) is still
talking to the store. ``slow_store()`` makes every call of a memory store take a few
milliseconds of real time, so these tests show that on any machine, without PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import wf
from tests.slow_store import ROUND_TRIP, slow_store
from wf.testing import MockClock, TestEngine

log: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    log.clear()


@wf.step
async def note(text: str) -> str:
    log.append(text)
    return text


@wf.workflow
async def quick(text: str) -> str:
    return text


@wf.workflow
async def starts_children_within_20_s() -> list[str]:
    # Shorter than ``suspend_after``: the run stays in flight throughout, its timer in-process.
    async with wf.timeout(20):
        # Each start is the store's work (the child's creation, its journal entry): the
        # timer must not expire during it.
        children = [await wf.start(quick, text, detach=True) for text in "abc"]
    return [child.id for child in children]


async def test_a_timeout_does_not_expire_while_the_store_works() -> None:
    async with TestEngine(slow_store()) as eng:
        start = eng.mock_clock.now()
        run = await wf.start(starts_children_within_20_s)
        assert len(await run.result()) == 3
        assert eng.mock_clock.now() - start < 20  # time stood still during the round trips


async def test_a_sleep_does_not_pass_while_another_run_talks_to_the_store() -> None:
    """The CI failure of ``test_group_concurrency_two_runs_of_a_group_at_once_in_order`` on
    PostgreSQL: run 0 sleeps while run 1, of the same group, starts; run 1's start is round
    trips (its creation, lease, admission, record), and run 0's sleep must not pass meanwhile."""
    started = asyncio.Event()

    @wf.step
    async def begin(n: int) -> None:
        log.append(f"start {n}")
        started.set()

    @wf.workflow(group="pair", group_concurrency=2)
    async def paired(n: int) -> int:
        await begin(n)
        await wf.sleep(10)  # shorter than suspend_after: in flight throughout
        await note(f"end {n}")
        return n

    async with TestEngine(slow_store()):
        first = await wf.start(paired, 0)
        await asyncio.wait_for(started.wait(), 10)
        second = await wf.start(paired, 1)  # while run 0 sleeps
        assert [await first.result(), await second.result()] == [0, 1]
    assert log[:2] == ["start 0", "start 1"], log  # both in flight at once


@wf.workflow
async def sleeps_a_week() -> str:
    await wf.sleep(7 * 86400)
    return await note("a week later")


async def test_waiting_for_news_from_the_store_is_idle_and_the_clock_jumps() -> None:
    """A worker waiting for work and ``result()`` waiting for the run are what the clock
    jumps for: neither holds time still, however slow the store."""
    async with TestEngine(slow_store()) as eng:
        start = eng.mock_clock.now()
        run = await wf.start(sleeps_a_week, detach=True)
        await eng.settle()
        assert await run.result() == "a week later"
        assert eng.mock_clock.now() - start >= 7 * 86400
        again = await wf.start(sleeps_a_week)
        assert await again.result() == "a week later"


async def test_a_thread_holds_the_clock_still_and_its_end_lets_it_jump() -> None:
    clock = MockClock()
    start = clock.now()
    sleeper = asyncio.ensure_future(clock.sleep_until(start + 3600))
    with clock.busy():
        await asyncio.to_thread(time.sleep, ROUND_TRIP)
        assert not sleeper.done() and clock.now() == start
    await asyncio.wait_for(sleeper, 10)
    assert clock.now() == start + 3600


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_time_that_is_no_number_is_refused(bad: float) -> None:
    clock = MockClock()
    with pytest.raises(ValueError, match="finite"):
        clock.jump(bad)
    assert clock.now() == 1_800_000_000.0
    with pytest.raises(ValueError, match="finite"):
        MockClock(start=bad)
