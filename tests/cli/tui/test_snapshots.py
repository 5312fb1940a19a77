"""Snapshots of the main screens (pytest-textual-snapshot), on runs with fixed ids and times.

Update after an intended change with ``pytest tests/cli/tui --snapshot-update`` and review the
SVGs (the report ``pytest`` writes on failure shows old and new side by side).
"""

from __future__ import annotations

import html
import re
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
def compare(snap_compare: Compare, request: pytest.FixtureRequest) -> Callable[..., None]:
    def check(state: str | None, *keys: str, extra: Any = None) -> None:
        app, before = app_on(state, *keys)

        async def run_before(pilot: Pilot[Any]) -> None:
            await before(pilot)
            if extra is not None:
                await extra(app, pilot)

        if not snap_compare(app, terminal_size=SIZE, run_before=run_before):
            pytest.fail(_what_differs(request.node), pytrace=False)

    return check


def _what_differs(node: pytest.Item) -> str:
    """The rows of the two screens that differ, as text: CI keeps the test's output, not the
    HTML report the plugin writes beside it. Read from what the plugin saved for that report."""
    import difflib
    import pickle

    from pytest_textual_snapshot import node_to_report_path

    saved = node_to_report_path(node)
    if not saved.exists():
        return "the snapshot differs (no saved comparison to show)"
    _, expected, actual, *_ = pickle.loads(saved.read_bytes())
    old, new = screen_rows(str(expected or "")), screen_rows(str(actual or ""))
    if old == new:
        old, new = _elements(str(expected or "")), _elements(str(actual or ""))
        head = "the snapshot differs in style only; its text elements, stored then taken:"
    else:
        head = "the snapshot differs; its rows, stored then taken:"
    diff = difflib.unified_diff(old, new, "stored", "taken", n=1, lineterm="")
    return "\n".join([head, *list(diff)[:80]])


_TEXT = re.compile(
    r'<text class="([^"]*)" x="([\d.]+)"[^>]*clip-path="url\(#[\w-]*line-(\d+)\)">([^<]*)</text>'
)


def screen_rows(svg: str) -> list[str]:
    """A Textual SVG screenshot's text, one string per terminal row (cells are 12.2 wide)."""
    rows: dict[int, list[str]] = {}
    for _, x, line, text in _TEXT.findall(svg):
        row = rows.setdefault(int(line), [])
        column = round(float(x) / 12.2)
        chars = html.unescape(text).replace("\xa0", " ")
        row.extend(" " * (column + len(chars) - len(row)))
        row[column : column + len(chars)] = chars
    return ["".join(rows[n]).rstrip() for n in sorted(rows)]


def _elements(svg: str) -> list[str]:
    return [
        f"row {line} x={x} {cls}: {html.unescape(text)}"
        for cls, x, line, text in _TEXT.findall(svg)
    ]


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
