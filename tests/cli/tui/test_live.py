"""Live screens redraw on every change of the store, at most every ``MIN_GAP`` seconds, and
after a slow redraw (a long run's screen) wait nine times as long as it took
(``wf.admin._follow.rest_after``)."""

from __future__ import annotations

import asyncio

import pytest

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

    async def changed() -> None:
        pass

    async def redraw() -> None:
        if not took:
            raise Stop
        now[0] += took.pop(0)

    with pytest.raises(Stop):
        await _live.follow_changes(changed, redraw)
    assert waits == [_live.MIN_GAP, pytest.approx(4.5), _live.MIN_GAP]
