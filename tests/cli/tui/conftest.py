"""Fixtures for the terminal UI's tests: a fake-clock engine with runs in every state.

Screens show local times, so tests run in UTC; runs record which code they started on (a hash of
the module's source), which is pinned so that editing ``flows.py`` does not change screens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Static

import wf.testing
from tests.cli.tui.flows import populate
from wf import Engine

SIZE = (130, 36)


@pytest.fixture(autouse=True)
def _stable_screens(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr("wf.engine._engine.deployment_of", lambda fn: "2027.01-a")
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    """A MockClock engine on a fresh MemoryStore (drivers left running are cancelled after)."""
    async with wf.testing.engine() as eng:
        yield eng


@pytest.fixture
async def runs(engine: Engine) -> dict[str, str]:
    """Run ids by state: see ``flows.populate``."""
    return await populate(engine)


def header(app: App[Any]) -> str:
    """The plain text of the run screen's header."""
    return str(app.screen.query_one("#header", Static).render())


async def settled(pilot: Pilot[Any]) -> None:
    """Let every table on the screen size its columns before a snapshot: a DataTable measures
    new rows when the app is next idle, which a loaded machine reaches late. The snapshot of
    the runs table caught it with columns only as wide as their labels, in full-suite runs
    only, after DataTable's own "measured" flag had cleared; so this waits for what the
    snapshot shows, every column at least as wide as its widest cell, then for a repaint."""
    from rich.cells import cell_len
    from textual.widgets import DataTable

    def width(cell: object) -> int:
        return max((cell_len(line) for line in str(cell).splitlines()), default=0)

    def sized() -> bool:
        for table in pilot.app.screen.query(DataTable):
            # DataTable has no public "measured" flag; this one is cleared once it has measured.
            if table._require_update_dimensions:
                return False
            for key, column in table.columns.items():
                cells = [width(cell) for cell in table.get_column(key)]
                if column.auto_width and column.content_width < max(cells, default=0):
                    return False
        return True

    await until(pilot, sized)
    await pilot.pause()
    await pilot.pause()


async def until(pilot: Pilot[Any], predicate: Callable[[], object], timeout: float = 5.0) -> None:
    """Let the app run until ``predicate()`` holds (live updates arrive asynchronously)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting for the screen to change")
        await pilot.pause(0.02)


async def until_async(
    pilot: Pilot[Any], predicate: Callable[[], Awaitable[bool]], timeout: float = 5.0
) -> None:
    """``until`` for a predicate that reads the store."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting for the store to change")
        await pilot.pause(0.02)
