"""The run screen's Logs tab: what the run's steps printed, per attempt, live."""

from __future__ import annotations

from textual.widgets import Log

import wf
from tests.cli.tui.conftest import SIZE, until
from wf import Engine
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
