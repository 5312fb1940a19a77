"""The byte-stream viewer: chunk indices, text and hex modes, live follow while a step writes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from textual.widgets import OptionList, RichLog

from tests.cli.tui.conftest import SIZE, until
from tests.cli.tui.flows import big_stream, cut_tailing, fixed_id, gate, tailing
from wf import Engine
from wf.cli.tui._app import InspectApp
from wf.cli.tui._run import RunScreen
from wf.cli.tui._streams import TAIL_BYTES, StreamViewer, hex_lines, text_lines


def log_text(app: InspectApp) -> str:
    log = app.screen.query_one("#stream-log", RichLog)
    return "\n".join(line.text for line in log.lines)


def status_line(app: InspectApp) -> str:
    return str(app.screen.query_one("#stream-status").render())


def test_chunks_are_drawn_with_their_index() -> None:
    assert [t.plain for t in text_lines(3, b"one\ntwo\n")] == ["    #3 │ one", "       │ two"]
    assert [t.plain for t in text_lines(0, b"tab\there\x07")] == ["    #0 │ tab    here·"]
    dump = [t.plain for t in hex_lines(12, bytes(range(65, 65 + 20)))]
    hex_part = " ".join(f"{b:02x}" for b in range(65, 81))
    assert dump[0] == f"   #12 │ 0000  {hex_part}  ABCDEFGHIJKLMNOP"
    assert dump[1].startswith("       │ 0010  51 52 53 54   ")
    assert dump[1].endswith(" QRST")


async def test_follow_a_stream_while_a_step_writes(engine: Engine) -> None:
    run = await engine.start(tailing, ("order-x",), {}, run_id=fixed_id(1_800_000_000.0, 1))
    app = InspectApp(engine, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("6")
        await until(pilot, lambda: "#0 │ first line of order-x" in log_text(app))
        assert "default · chunks 0–0 · open · text (t) · following (f)" in status_line(app)
        gate("tail:order-x").set()  # the step writes its second chunk and closes the stream
        await until(pilot, lambda: "#1 │ second line of order-x" in log_text(app))
        await until(pilot, lambda: "chunks 0–1 · closed" in status_line(app))
        assert await run.result() == 2


async def test_a_stream_whose_writer_was_cut_off_is_shown_incomplete(engine: Engine) -> None:
    run = await engine.start(cut_tailing, ("order-y",), {}, run_id=fixed_id(1_800_000_000.0, 2))
    assert (await run.settle(timeout=10)).status.value == "failed"
    app = InspectApp(engine, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("6")
        await until(pilot, lambda: "#0 │ half a line of order-y" in log_text(app))
        await until(pilot, lambda: "incomplete: step 'cut_tail' was cut off" in status_line(app))


async def test_hex_mode_and_choosing_a_stream(engine: Engine, runs: dict[str, str]) -> None:
    app = InspectApp(engine, run_id=runs["completed"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("6")
        viewer = app.screen.query_one(StreamViewer)
        await until(pilot, lambda: viewer.shown is not None and viewer.shown[2])
        assert "#2 │ handed to carrier" in log_text(app)
        assert isinstance(app.focused, OptionList)
        await pilot.press("down", "enter")  # label.bin
        await until(pilot, lambda: "#0 │ ‰PNG" in log_text(app) or "#0 │ �PNG" in log_text(app))
        await pilot.press("t")
        assert "#0 │ 0000  89 50 4e 47 0d 0a 1a 0a 00 00 00 0d 49 48 44 52  .PNG........IHDR" in (
            log_text(app)
        )
        assert "label.bin · chunks 0–0 · closed · hex (t)" in status_line(app)
        await pilot.press("f")
        assert "paused (f)" in status_line(app)


async def test_number_keys_switch_tabs_from_the_streams_tab(
    engine: Engine, runs: dict[str, str]
) -> None:
    """The stream list has the focus on the Streams tab; 1 to 7 still switch tabs."""
    from textual.widgets import TabbedContent

    app = InspectApp(engine, run_id=runs["completed"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        tabs = app.screen.query_one(TabbedContent)
        for key, tab in (("6", "streams"), ("7", "logs"), ("6", "streams"), ("2", "events")):
            await pilot.press(key)
            await until(pilot, lambda tab=tab: tabs.active == tab)


async def test_a_run_screen_opens_without_reading_its_streams(engine: Engine) -> None:
    # A run of 20 chunks of 20 MB took 258 s to open, on its Steps tab: every chunk was read
    # and drawn as the screen opened. A stream is read once its tab is shown.
    run = await engine.start(big_stream, (3, 300_000), {}, run_id=fixed_id(1_800_000_000.0, 3))
    assert await run.result() == 3
    app = InspectApp(engine, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.pause()
        viewer = app.screen.query_one(StreamViewer)
        assert viewer.shown is None
        assert log_text(app) == ""
        await pilot.press("6")
        await until(pilot, lambda: viewer.shown is not None and viewer.shown[2])
        assert "<end of 2>" in log_text(app)


async def test_a_big_stream_shows_its_tail_and_says_what_was_left_out(engine: Engine) -> None:
    # Drawing a 2 MB chunk took Textual 0.8 s: the viewer keeps and draws the last
    # TAIL_BYTES, and says how to get it all.
    run = await engine.start(big_stream, (4, 200_000), {}, run_id=fixed_id(1_800_000_000.0, 4))
    assert await run.result() == 4
    app = InspectApp(engine, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("6")
        viewer = app.screen.query_one(StreamViewer)
        await until(pilot, lambda: viewer.shown is not None and viewer.shown[2])
        assert viewer.shown is not None
        kept = viewer.shown[1]
        assert sum(map(len, kept)) == TAIL_BYTES
        assert kept[-1].endswith(b"<end of 3>\n")
        text = log_text(app)
        assert "<end of 3>" in text and "<end of 2>" in text
        assert "<end of 1>" not in text
        assert "… chunks 0–1 not shown" in text
        assert f"wf stream {run.id} writes it all" in status_line(app)
        assert "chunks 2–3" in status_line(app)
        assert len(text) < 2 * TAIL_BYTES


async def test_the_tail_of_a_long_stream_is_found_reading_about_the_tail(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The viewer read a stream's last 2,000 chunks whatever their size (400 MB) to draw them.
    run = await engine.start(big_stream, (24, 100_000), {}, run_id=fixed_id(1_800_000_000.0, 5))
    assert await run.result() == 24
    app = InspectApp(engine, run_id=run.id)
    read = 0
    follow = app.client.follow_stream

    async def counted(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        nonlocal read
        async for chunk in follow(*args, **kwargs):
            read += len(chunk)
            yield chunk

    monkeypatch.setattr(app.client, "follow_stream", counted)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("6")
        viewer = app.screen.query_one(StreamViewer)
        await until(pilot, lambda: viewer.shown is not None and viewer.shown[2])
        assert "<end of 23>" in log_text(app)
        assert "… chunks 0–20 not shown" in log_text(app)
    assert read < 4 * TAIL_BYTES, f"read {read:,} bytes of 2,400,000 to show {TAIL_BYTES:,}"
