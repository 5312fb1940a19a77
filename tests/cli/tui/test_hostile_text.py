"""Recorded text is anyone's: the app shows it as text, never as markup, its controls visible.

Textual reads a ``str`` in a table cell, a notification or a title as markup: a failed run whose
error was ``[@click=app.screenshot('p','.')]CLICK[/]`` overwrote a file when its cell was
clicked, and ``[/]`` crashed the app. ``tests.cli.hostile_flows`` puts such text (and escape
sequences, a carriage return, a bidi override) in errors, step names, hook tokens and the
workflow names of runs and schedules.
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from tests.cli import hostile_flows as flows
from tests.cli.tui.conftest import SIZE, header, until
from tests.cli.tui.flows import settle
from wf import Engine
from wf.cli.tui._app import InspectApp
from wf.cli.tui._prompts import DetailScreen
from wf.cli.tui._run import RunScreen
from wf.cli.tui._runs import RunsScreen
from wf.cli.tui._schedules import SchedulesScreen
from wf.engine._schedules import register

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")
SHOWN_CONTROLS = r"\x1b]0;pwned\x07 \x1b[2J safe\rEVIL back\x08"


def cells(table: DataTable[Any]) -> str:
    """Every cell of the table as text; each one holding recorded text is a ``Text``, and no
    part of the table, as drawn, carries an action."""
    rows = []
    for i in range(table.row_count):
        row = table.get_row_at(i)
        for cell in row:
            assert isinstance(cell, Text) or "[" not in str(cell), cell
        rows.append(" | ".join(str(cell) for cell in row))
    for y in range(table.row_count + 1):
        for segment in table.render_line(y):
            meta = segment.style.meta if segment.style else {}
            assert "@click" not in meta, meta
    text = "\n".join(rows)
    assert not RAW.search(text), repr(RAW.search(text))
    return text


async def table_of(pilot: Pilot[Any], app: InspectApp, selector: str, rows: int) -> str:
    table: DataTable[Any] = app.screen.query_one(selector, DataTable)
    await until(pilot, lambda: table.row_count >= rows)
    await pilot.pause()
    return cells(table)


async def test_recorded_text_is_shown_as_text_in_every_table(engine: Engine) -> None:
    failed = await engine.start(flows.failing, (), {})
    await settle(engine, failed.id)
    waiting = await engine.start(flows.waiting, (), {})
    await settle(engine, waiting.id)
    await register(engine, "nightly", flows.failing, cron="0 3 * * *")
    app = InspectApp(engine)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        runs = await table_of(pilot, app, "#runs", 2)
        assert "wf[/]name\\u202e" in runs and "hook[/]flow" in runs
        assert f"ValueError: {flows.MARKUP} {SHOWN_CONTROLS}"[:55] in runs
        assert "tok[/]en [@click=app.quit]x[/]\\u202e" in runs

        await pilot.press("S")
        await until(pilot, lambda: isinstance(app.screen, SchedulesScreen))
        assert "wf[/]name\\u202e" in await table_of(pilot, app, "#schedules", 1)
        await pilot.press("escape")

        app.open_run(failed.id)
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        steps = await table_of(pilot, app, "#steps-table", 1)
        assert "step[/]name\\u202e" in steps and SHOWN_CONTROLS in steps
        text = header(app)
        assert f"{flows.MARKUP} {SHOWN_CONTROLS}" in text and not RAW.search(text)
        await pilot.press("2")
        events = await table_of(pilot, app, "#events-table", 3)
        assert "step 'step[/]name\\u202e' failed" in events
        await pilot.press("1", "enter")  # the step's detail, titled with its name
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        body = str(app.screen.query_one(Static).render())
        assert SHOWN_CONTROLS in body and not RAW.search(body)
        await pilot.press("escape", "escape")

        app.open_run(waiting.id)
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("4")
        assert "tok[/]en [@click=app.quit]x[/]\\u202e" in await table_of(
            pilot, app, "#hooks-table", 1
        )
        app.prompt_payload(flows.TOKEN, None)
        await pilot.press(*'"yes"', "enter")  # delivered: a toast names the token
        await until(
            pilot, lambda: any("payload delivered" in n.message for n in app._notifications)
        )
        [note] = [n for n in app._notifications if "payload delivered" in n.message]
        assert not note.markup and "tok[/]en [@click=app.quit]x[/]\\u202e" in note.message
    assert app.return_code in (None, 0)
    assert getattr(app, "_exception", None) is None
