"""Snapshots of the main screens (pytest-textual-snapshot), on runs with fixed ids and times.

Update after an intended change with ``pytest tests/cli/tui --snapshot-update`` and review the
SVGs (the report ``pytest`` writes on failure shows old and new side by side).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from tests.cli.tui.conftest import SIZE, settled, until
from tests.cli.tui.flows import populate
from wf import Engine
from wf.cli.tui._app import InspectApp
from wf.cli.tui._run import RunScreen
from wf.cli.tui._runs import RunsScreen
from wf.store.memory import MemoryStore
from wf.testing import MockClock

Compare = Callable[..., bool]


def app_on(
    state: str | None, *keys: str
) -> tuple[InspectApp, Callable[[Pilot[Any]], Awaitable[None]]]:
    """An app, and the steps that fill its store and open the run in ``state`` (in its loop)."""
    engine = Engine(MemoryStore(), MockClock())
    app = InspectApp(engine)

    async def before(pilot: Pilot[Any]) -> None:
        runs = await populate(engine, live=False)
        assert isinstance(app.screen, RunsScreen)
        await app.screen.reload()
        if state is not None:
            app.open_run(runs[state])
            await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press(*keys)
        await settled(pilot)

    return app, before


@pytest.fixture
def compare(snap_compare: Compare) -> Callable[..., None]:
    def check(state: str | None, *keys: str, extra: Any = None) -> None:
        app, before = app_on(state, *keys)

        async def run_before(pilot: Pilot[Any]) -> None:
            await before(pilot)
            if extra is not None:
                await extra(app, pilot)

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    return check


def test_runs_screen(compare: Callable[..., None]) -> None:
    compare(None)


def test_run_retrying(compare: Callable[..., None]) -> None:
    compare("retrying")


def test_run_values(compare: Callable[..., None]) -> None:
    compare("completed", "3")


def test_stream_hex(compare: Callable[..., None]) -> None:
    compare("completed", "6", "down", "enter", "t")


def test_payload_refused(compare: Callable[..., None]) -> None:
    async def refused(app: InspectApp, pilot: Pilot[Any]) -> None:
        app.screen.query_one("#payload", Input).value = '{"approved": "maybe"}'
        await pilot.press("enter")
        await pilot.pause()

    compare("hook", "r", extra=refused)
