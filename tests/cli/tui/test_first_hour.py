"""What a newcomer meets in the inspector: a footer with only the keys that apply, Tab taking
the workflow suggestion, chunk writes grouped in the Events tab, "updated" counting journal
writes, a step's arguments, result and timing in words, and cancelled operations called so."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.widgets import DataTable, Input, Static

import wf
from tests.cli.tui.conftest import SIZE, header, until
from tests.cli.tui.flows import settle
from wf import Engine
from wf.admin import LocalAdmin
from wf.cli.tui._app import InspectApp
from wf.cli.tui._model import load_run
from wf.cli.tui._prompts import DetailScreen
from wf.cli.tui._rows import header as header_text
from wf.cli.tui._run import RunScreen

GATE: dict[str, asyncio.Event] = {}


@wf.step
async def chatter(n: int) -> int:
    async with wf.stream_writer() as out:
        for i in range(n):
            await out.write(f"line {i}\n")
    return n


@wf.workflow(name="firsthour.chatty")
async def chatty(n: int) -> int:
    return await chatter(n)


@wf.step
async def priced(order: str, cents: int = 0) -> int:
    return cents * 2


@wf.workflow(name="firsthour.priced")
async def pricing(order: str) -> int:
    return await priced(order, cents=5)


@wf.step
async def quick() -> str:
    return "fast"


@wf.workflow(name="firsthour.race")
async def race() -> int:
    index, _ = await wf.select(quick(), wf.sleep(3600))
    return index


@wf.step
async def item(i: int) -> int:
    if i == 0:
        await asyncio.sleep(0)
        raise wf.FatalError("item 0 is broken")
    await GATE.setdefault("item", asyncio.Event()).wait()  # never set: cancelled by the failure
    return i


@wf.workflow(name="firsthour.fanout")
async def fanout() -> list[int]:
    return list(await wf.map(item, [1, 0]))


@wf.step
async def slow_chunks() -> int:
    async with wf.stream_writer() as out:
        await out.write("a\n")
        await GATE.setdefault("chunks", asyncio.Event()).wait()
        await out.write("b\n")
    return 2


@wf.workflow(name="firsthour.slow")
async def slow() -> int:
    return await slow_chunks()


async def started(engine: Engine, flow: Any, *args: Any) -> str:
    run = await engine.start(flow, args, {})
    await settle(engine, run.id)
    return run.id


async def open_run(app: InspectApp, pilot: Any, run_id: str) -> RunScreen:
    app.open_run(run_id)
    await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
    assert isinstance(app.screen, RunScreen)
    return app.screen


def footer_keys(app: InspectApp) -> set[str]:
    return {b.binding.description for b in app.active_bindings.values() if b.binding.show}


async def test_the_footer_shows_only_the_keys_that_apply(engine: Engine) -> None:
    done = await started(engine, pricing, "o-1")
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await open_run(app, pilot, done)
        await pilot.pause()
        keys = footer_keys(app)
        assert {"back", "copy id"} <= keys
        assert not keys & {"cancel", "wake", "resume hook", "parent"}, keys
        await pilot.press("r", "u", "c")  # hidden keys do nothing
        assert isinstance(app.screen, RunScreen)


async def test_tab_accepts_the_workflow_suggestion(engine: Engine) -> None:
    await started(engine, pricing, "o-1")
    await started(engine, race)
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("f")
        field = app.screen.query_one("#workflow", Input)
        await pilot.press(*"firsthour.p")
        await until(pilot, lambda: field._suggestion == "firsthour.priced")
        await pilot.press("tab")
        assert field.value == "firsthour.priced"
        await pilot.press("enter")
        table = app.screen.query_one("#runs", DataTable)
        await until(pilot, lambda: table.row_count == 1)


async def test_chunk_writes_are_one_row_in_the_events_tab(engine: Engine) -> None:
    run_id = await started(engine, chatty, 40)
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_run(app, pilot, run_id)
        await pilot.press("2")
        events = screen.query_one("#events-table", DataTable)
        types = [str(events.get_row_at(i)[2]) for i in range(events.row_count)]
        assert "stream_write ×40" in types
        assert types.count("stream_write") == 0
        assert events.row_count < 10
        row = types.index("stream_write ×40")
        assert "40 chunks written to stream 'default'" in str(events.get_row_at(row)[3])


async def test_updated_counts_the_latest_journal_write(engine: Engine) -> None:
    GATE.pop("chunks", None)
    run = await engine.start(slow, (), {})
    for _ in range(500):
        if [e for e in await engine.store.read_journal(run.id) if e["type"] == "stream_write"]:
            break
        await asyncio.sleep(0.001)
    engine.clock.jump(90)  # type: ignore[attr-defined]
    GATE["chunks"].set()
    await settle(engine, run.id)
    view = await load_run(LocalAdmin(engine), run.id)
    text = str(header_text(view))
    assert "updated now" in text, text


async def test_a_steps_detail_says_its_arguments_result_attempts_and_timing(
    engine: Engine,
) -> None:
    run_id = await started(engine, pricing, "o-1")
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await open_run(app, pilot, run_id)
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        body = str(app.screen.query_one(Static).render())
        assert "step 'priced': completed" in body
        assert 'arguments: "o-1", cents=5' in body
        assert "result: 10" in body
        assert "attempts: 1" in body
        assert "started " in body and "took " in body
        assert '"started_at"' not in body  # words, not the raw row


async def test_a_select_loser_and_a_map_sibling_show_as_cancelled(engine: Engine) -> None:
    GATE.pop("item", None)
    raced = await started(engine, race)
    failed = await started(engine, fanout)
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_run(app, pilot, raced)
        steps = screen.query_one("#steps-table", DataTable)
        rows = {str(steps.get_row_at(i)[1]): str(steps.get_row_at(i)[3]) for i in range(2)}
        assert rows == {"step": "completed", "sleep": "cancelled"}
        app.pop_screen()
        screen = await open_run(app, pilot, failed)
        steps = screen.query_one("#steps-table", DataTable)
        statuses = sorted(str(steps.get_row_at(i)[3]) for i in range(steps.row_count))
        assert statuses == ["cancelled", "failed"], statuses
        assert "interrupted" not in header(app)
