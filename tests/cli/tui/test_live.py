"""Live screens redraw on every change the client tells of (``Admin.changes``), at most every
``MIN_GAP`` seconds, and after a slow redraw (a long run's screen) wait nine times as long as
it took (``wf.admin._follow.rest_after``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from textual.css.query import NoMatches

from wf.cli.tui import _live


class Stop(Exception):
    pass


async def test_a_slow_redraw_keeps_redraws_to_a_tenth_of_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        if delay:
            waits.append(delay)
        await real_sleep(0)

    now = [100.0]
    monkeypatch.setattr(_live.asyncio, "sleep", sleep)
    monkeypatch.setattr(asyncio.get_running_loop(), "time", lambda: now[0])
    took = [0.001, 0.5, 0.002]

    async def changes() -> AsyncIterator[None]:
        while True:  # the runs change all the time
            yield
            await real_sleep(0)

    async def redraw() -> None:
        if not took:
            raise Stop
        now[0] += took.pop(0)

    with pytest.raises(Stop):
        await _live.follow_changes(changes, redraw, timeout=60)
    assert waits == [_live.MIN_GAP, pytest.approx(4.5), _live.MIN_GAP]


async def test_a_change_in_a_redraw_wakes_the_next_round_and_a_dead_feed_is_opened_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_live, "MIN_GAP", 0)
    told = asyncio.Event()
    redraws: list[float] = []
    clock = asyncio.get_running_loop().time

    opened: list[float] = []

    async def changes() -> AsyncIterator[None]:
        opened.append(clock())
        if len(opened) > 1:
            return  # the run is gone: the feed ends at once
        await told.wait()
        yield  # one change, told while the first redraw reads
        raise ConnectionError("the server went away")

    async def redraw() -> None:
        redraws.append(clock())
        if len(redraws) == 1:
            told.set()
            await asyncio.sleep(0.01)  # the change lands while this round reads
        if len(redraws) == 3:
            raise Stop

    began = clock()
    with pytest.raises(Stop):
        await _live.follow_changes(changes, redraw, timeout=0.3)
    # The change woke the second round at once; the feed then failed, and the third round
    # came by the timeout, not never; the feed was opened again a timeout after it failed.
    assert redraws[1] - began < 0.25
    assert 0.25 <= redraws[2] - redraws[1] < 2
    assert len(opened) == 2
    assert 0.25 <= opened[1] - redraws[0] < 2  # the failure came in the first redraw


async def test_a_redraw_that_finds_the_screen_taken_down_ends_the_following() -> None:
    """The app closing while a redraw read (``run_test``'s exit, a quit): the screen's widgets
    are gone and the redraw's query raised ``NoMatches`` out of the screen's worker, which
    failed the app as it closed."""

    async def changes() -> AsyncIterator[None]:
        while True:
            yield
            await asyncio.sleep(0)

    async def redraw() -> None:
        raise NoMatches("No nodes match '#runs' on RunsScreen()")

    await asyncio.wait_for(_live.follow_changes(changes, redraw, timeout=60), 5)
