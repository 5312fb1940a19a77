"""The run screen's Logs tab: what the run's steps printed, per attempt, live."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.widgets import Log

import wf
from tests.cli.tui.conftest import SIZE, until
from wf import Engine
from wf.admin import LocalAdmin, LogPage
from wf.cli.tui._app import InspectApp
from wf.cli.tui._run import RunScreen


@wf.step
def prints_two_lines(n: int) -> int:
    print(f"first {n}")
    print(f"second {n}")
    return n


@wf.workflow
async def printing() -> int:
    return await prints_two_lines(1) + await prints_two_lines(2)


async def test_the_logs_tab_shows_each_attempts_lines(engine: Engine) -> None:
    run = await wf.start(printing)
    assert await run.result() == 3
    app = InspectApp(engine, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("7")
        log = app.screen.query_one("#logs-view", Log)
        assert list(log.lines) == [
            "── prints_two_lines · attempt 1 ──",
            "first 1",
            "second 1",
            "── prints_two_lines · attempt 1 ──",
            "first 2",
            "second 2",
        ]
        assert "Logs (4)" in str(app.screen.query_one("#--content-tab-logs").label)


class _LateLogs(LocalAdmin):
    """A client that, once ``armed``, holds its next log page (read already) until ``release``."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.armed = False
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def log_page(self, run_id: str, **options: Any) -> LogPage:
        page = await super().log_page(run_id, **options)
        if self.armed:
            self.armed = False
            self.held.set()
            await self.release.wait()
        return page


@wf.workflow
async def printing_around_a_hook() -> int:
    first = await prints_two_lines(1)
    await wf.create_hook(int, token="more-lines").next()
    return first + await prints_two_lines(2)


async def test_two_reads_at_once_show_each_line_once(engine: Engine) -> None:
    # The live loop reads when the run changes; a key, or the screen coming back, reads too:
    # lines that two overlapping reads both fetched are shown once.
    run = await wf.start(printing_around_a_hook)
    client = _LateLogs(engine)
    app = InspectApp(client, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        screen = app.screen
        assert isinstance(screen, RunScreen)
        logs = screen.query_one("#logs-view", Log)
        await until(pilot, lambda: len(logs.lines) == 3)
        client.armed = True  # the live loop's read, when the run goes on
        await wf.resume_hook("more-lines", 1)
        assert await run.result() == 3
        await until(pilot, client.held.is_set)
        second = asyncio.ensure_future(screen.reload())  # as a key would
        for _ in range(5):
            await pilot.pause(0.02)
        client.release.set()
        await asyncio.wait_for(second, 5)
        await until(pilot, lambda: len(logs.lines) >= 6)
        for _ in range(5):
            await pilot.pause(0.02)
        assert len(logs.lines) == 6
