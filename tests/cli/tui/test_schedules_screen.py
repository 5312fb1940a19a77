"""The schedules screen (``S``): schedules with their last run; enter opens that run, whose
header names the schedule; a run deleted by retention says so; times are in the schedule's zone
and a series that ended says so."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.cli.tui.conftest import SIZE, header, until
from tests.cli.tui.flows import ship
from wf import Engine
from wf.cli.tui._app import InspectApp
from wf.cli.tui._run import RunScreen
from wf.cli.tui._schedules import SchedulesScreen
from wf.engine._retention import sweep
from wf.engine._schedules import fire, register
from wf.store import Schedule
from wf.store.memory import MemoryStore


async def schedule_rows(app: InspectApp, pilot: Pilot[Any], count: int) -> list[list[str]]:
    """Open the schedules screen (``S``) and read its ``count`` rows as text."""
    await pilot.pause()
    await pilot.press("S")
    await until(pilot, lambda: isinstance(app.screen, SchedulesScreen))
    table: DataTable[Any] = app.screen.query_one("#schedules", DataTable)
    await until(pilot, lambda: table.row_count == count)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(count)]


async def test_schedules_screen_lists_them_and_opens_the_last_run(engine: Engine) -> None:
    made = await register(engine, "nightly", ship, cron="0 3 * * *", input=["o-3"])
    assert made.next_run is not None
    engine.clock.jump(made.next_run - engine.clock.now())  # type: ignore[attr-defined]
    fired = await fire(engine, "nightly", engine.clock.now())
    assert fired is not None and fired.last_run_id is not None
    await register(engine, "weekly", ship, cron="0 9 * * 1", tz="Europe/Paris", input=["o-1"])
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        rows = await schedule_rows(app, pilot, 2)
        assert [row[0] for row in rows] == ["nightly", "weekly"]
        assert rows[0][2] == "0 3 * * *" and rows[1][3] == "Europe/Paris"
        assert rows[0][6] in ("pending", "running", "suspended", "completed")
        assert rows[1][6] == "-"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        assert isinstance(app.screen, RunScreen)
        assert app.screen.run_id == fired.last_run_id
        await until(pilot, lambda: "started by schedule nightly" in header(app))


async def test_a_run_deleted_by_retention_says_so(engine: Engine) -> None:
    run = await engine.start(ship, ("o-1",), {})
    await run.settle()
    await engine.settle()  # type: ignore[attr-defined]
    done = await sweep(engine, older_than=0)
    assert done.deleted == [run.id]
    app = InspectApp(engine, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "was deleted by wf gc" in header(app))


async def test_times_are_in_the_schedules_zone_and_an_ended_series_says_so(engine: Engine) -> None:
    paris = await register(engine, "paris", ship, cron="30 2 * * *", tz="Europe/Paris", input=["o"])
    assert paris.next_run is not None
    # One fire in the next minute, then none (croniter's seconds and year fields).
    once = dt.datetime.fromtimestamp(engine.clock.now() // 60 * 60 + 60, dt.UTC)
    cron = f"{once.minute} {once.hour} {once.day} {once.month} * 0 {once.year}"
    await register(engine, "once", ship, cron=cron, input=["o-2"])
    engine.clock.jump(once.timestamp() - engine.clock.now())  # type: ignore[attr-defined]
    fired = await fire(engine, "once", engine.clock.now())
    assert fired is not None and fired.ended and fired.next_run is None
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        rows = {row[0]: row for row in await schedule_rows(app, pilot, 2)}
        local = dt.datetime.fromtimestamp(paris.next_run, ZoneInfo("Europe/Paris"))
        assert rows["paris"][4] == local.strftime("%Y-%m-%d %H:%M %Z")  # 2027-01-16 02:30 CET
        assert rows["once"][4] == "ended"
        assert rows["once"][5] == once.strftime("%Y-%m-%d %H:%M UTC")


class _OneDamagedSchedule(MemoryStore):
    """A store whose schedule listing meets one damaged file (a memory store holds none)."""

    async def list_schedules(self) -> list[Schedule]:
        self.faults.note("schedule file", "3fa9.json", "schedules/3fa9.json", "not a schedule")
        return await super().list_schedules()


async def test_the_bar_says_a_damaged_schedule_is_not_listed() -> None:
    engine = Engine(_OneDamagedSchedule())
    await register(engine, "nightly", ship, cron="0 3 * * *", input=["o-3"])
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        rows = await schedule_rows(app, pilot, 1)
        assert [row[0] for row in rows] == ["nightly"]
        bar = str(app.screen.query_one("#bar").render())
        assert "1 schedule · 1 damaged schedule not listed (wf store verify)" in bar
    assert not engine.store.faults  # the screen said it: not the store's own find
