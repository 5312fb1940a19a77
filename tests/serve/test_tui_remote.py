"""The terminal UI over ``WF_URL``: the app renders an ``HttpAdmin`` on a ``wf serve`` (served by
uvicorn in this event loop) as it renders the store here: the runs table, a run's screen (its
steps, hooks, logs and streams), and an action, cancel, done by the server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from textual.widgets import DataTable, Log, RichLog

import wf
from tests.cli.tui.conftest import SIZE, header, until
from tests.serve.conftest import Api
from wf import admin
from wf.cli.tui._app import InspectApp
from wf.cli.tui._run import RunScreen
from wf.cli.tui._runs import RunsScreen
from wf.cli.tui._streams import StreamViewer


@pytest.fixture(params=["local"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The server's store: the app sees it through the server only."""
    kind: str = request.param
    return kind


@pytest_asyncio.fixture
async def http(live: Api) -> AsyncIterator[admin.HttpAdmin]:
    """A client of the server, as ``wf.admin.connect()`` makes one for ``WF_URL``."""
    from wf._remote import RemoteClient

    remote = RemoteClient(str(live.client.base_url))
    try:
        yield admin.HttpAdmin(remote)
    finally:
        remote.close()


def _ids(app: InspectApp) -> list[str]:
    screen = app.screen
    return [record.id for record in screen._rows] if isinstance(screen, RunsScreen) else []


async def test_the_app_lists_opens_and_cancels_runs_through_a_server(
    http: admin.HttpAdmin,
) -> None:
    done = await http.start("tests.serve.flows:talker", ["ada"])
    await http.ended(done)
    streamed = await http.start("tests.serve.flows:streaming", [3])
    await http.ended(streamed)
    waiting = await http.start("tests.serve.flows:approval", ["tui"])
    assert (await http.settle(waiting)).status is wf.RunStatus.SUSPENDED

    app = InspectApp(http, location="http://server")
    assert app.client is http  # nothing of a store: every read and action is the client's
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: set(_ids(app)) == {done, streamed, waiting}, timeout=20)
        assert _ids(app) == [waiting, streamed, done]  # newest first

        # A run's screen: what it printed (logs) read through the server.
        table = app.screen.query_one("#runs", DataTable)
        table.move_cursor(row=2)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        assert "Completed in" in header(app)
        await pilot.press("7")
        logs = app.screen.query_one("#logs-view", Log)
        await until(pilot, lambda: "hello ada from a step" in "\n".join(logs.lines))
        await pilot.press("escape")

        # A byte stream, followed through the server.
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        app.screen.query_one("#runs", DataTable).move_cursor(row=1)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("6")  # the streams tab: a stream is read once its tab is shown
        viewer = app.screen.query_one("#stream-viewer", StreamViewer)

        def chunks() -> list[bytes]:
            shown = viewer.shown
            return shown[1] if shown else []

        await until(pilot, lambda: chunks() == [b"line 0\n", b"line 1\n", b"line 2\n"])
        await pilot.press("escape")

        # Cancel the waiting run from its screen: asked first, done by the server, and the
        # screen follows the run to its end.
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        app.screen.query_one("#runs", DataTable).move_cursor(row=0)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        assert "Waiting on hook `approve:tui`" in header(app)
        hooks: Any = app.screen.query_one("#hooks-table", DataTable)
        assert hooks.row_count == 1
        await pilot.press("c")
        await pilot.press("y")
        await until(pilot, lambda: "cancelled" in header(app).lower(), timeout=20)
    record = (await http.run_detail(waiting)).run
    assert record.status is wf.RunStatus.CANCELLED


async def test_the_replay_check_says_a_server_does_not_do_it(http: admin.HttpAdmin) -> None:
    run_id = await http.start("tests.serve.flows:adder", [1, 2])
    await http.ended(run_id)
    app = InspectApp(http, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("p")
        await until(pilot, lambda: "not checked through a wf serve" in header(app))


async def test_launch_over_wf_url_opens_the_app_on_the_servers_runs(
    http: admin.HttpAdmin, live: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``wf inspect``'s launch: ``wf.admin.connect()`` gives the app the HTTP client when
    ``WF_URL`` names a server (the store here is another, and empty)."""
    from textual.pilot import Pilot

    from wf.cli.tui import _run_app

    run_id = await http.start("tests.serve.flows:adder", [2, 3])
    await http.ended(run_id)
    seen: dict[str, Any] = {}

    async def drive(pilot: Pilot[object]) -> None:
        app = pilot.app
        assert isinstance(app, InspectApp)
        seen["client"] = app.client
        seen["where"] = app.sub_title
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        seen["header"] = header(app)
        await pilot.press("q")

    original = InspectApp.run_async
    monkeypatch.setattr(
        InspectApp,
        "run_async",
        lambda app: original(app, headless=True, size=SIZE, auto_pilot=drive),
    )
    monkeypatch.setenv("WF_URL", str(live.client.base_url))
    monkeypatch.setenv("WF_DIR", str(tmp_path / "elsewhere" / ".workflows"))
    await _run_app(run_id)
    assert isinstance(seen["client"], admin.HttpAdmin)
    assert seen["where"] == str(live.client.base_url)
    assert "Completed in" in seen["header"]
    assert not (tmp_path / "elsewhere").exists()  # the store here is never opened


async def test_a_server_out_of_reach_is_said_on_the_screens_not_a_crash() -> None:
    from textual.css.query import NoMatches
    from textual.widgets import Static

    from tests.serve.conftest import free_port
    from wf._remote import RemoteClient

    remote = RemoteClient(f"http://127.0.0.1:{free_port()}", timeout=1)
    try:
        app = InspectApp(admin.HttpAdmin(remote))
        async with app.run_test(size=SIZE) as pilot:

            def bar() -> str:
                return str(app.screen.query_one("#bar", Static).render())

            await until(pilot, lambda: "cannot be listed now" in bar(), timeout=10)
            assert "trying again" in bar()
            app.open_run("wrun_01M94SZV2G4JFY1SAZN387ECS3")

            def said() -> bool:
                try:
                    return "cannot be read now" in header(app)
                except NoMatches:  # the screen is not composed yet
                    return False

            await until(pilot, said, timeout=10)
            await pilot.press("c")  # no view: nothing to cancel, nothing crashes
            assert app.is_running
    finally:
        remote.close()


SIZES = [7, 600_000, 5, 300_000]
"""Chunks bigger than the server's 256 KB pieces of a stream's body, and small ones."""


async def test_a_stream_over_a_server_is_its_chunks_as_the_store_has_them(
    http: admin.HttpAdmin, live: Api
) -> None:
    # The TUI over WF_URL counted the server's 256 KB pieces as chunks: a 600 KB chunk was
    # chunks #1-#3 there, #1 in the TUI on the store; the streams' chunk numbers differed.
    run_id = await http.start("tests.serve.flows:sized_chunks", {"sizes": SIZES})
    await http.ended(run_id)
    here = admin.LocalAdmin(live.engine)
    for start in (0, 1, 2, -1):
        for follow in (True, False):
            local = [c async for c in here.follow_stream(run_id, "default", start, follow=follow)]
            remote = [c async for c in http.follow_stream(run_id, "default", start, follow=follow)]
            assert [len(c) for c in remote] == [len(c) for c in local], (start, follow)
            assert remote == local
    raw = await live.client.get(f"/api/v1/runs/{run_id}/streams/default?follow=false")
    whole = b"".join(bytes([65 + index]) * size for index, size in enumerate(SIZES))
    assert raw.content == whole and "wf-stream-framing" not in raw.headers  # as before


async def test_the_app_over_a_server_numbers_a_streams_chunks_as_the_store_does(
    http: admin.HttpAdmin, live: Api
) -> None:
    run_id = await http.start("tests.serve.flows:sized_chunks", {"sizes": SIZES})
    await http.ended(run_id)
    seen = [await _stream_tab(client, run_id) for client in (admin.LocalAdmin(live.engine), http)]
    local, remote = seen
    assert "chunks 3–3" in local[0]  # the tail: the end of #3
    assert remote == local


async def _stream_tab(client: admin.Admin, run_id: str) -> tuple[str, list[str], Any]:
    """The streams tab of the run's screen: its status line, its chunk numbers, what it shows."""
    app = InspectApp(client, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("6")
        viewer = app.screen.query_one("#stream-viewer", StreamViewer)
        await until(pilot, lambda: viewer.shown is not None and viewer.shown[2])
        status = str(viewer.query_one("#stream-status").render())
        numbers = [line.text.split("│")[0].strip() for line in viewer.query_one(RichLog).lines]
        return status, [number for number in numbers if number], viewer.shown
