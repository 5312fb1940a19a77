"""The run screen, driven by Textual's pilot: the header's explanation in every state, the tabs,
and navigation between parent and child runs."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import DataTable

from tests.cli.tui.conftest import SIZE, header, until
from wf import Engine, StoreCorrupted
from wf.cli.tui._app import InspectApp
from wf.cli.tui._prompts import DetailScreen
from wf.cli.tui._run import RunScreen
from wf.cli.tui._values import SHOWN, ValuesTree
from wf.store import RunRecord
from wf.store.memory import MemoryStore

EXPLANATIONS = {
    "completed": ["completed", "Completed in 0.00s."],
    "sleeping": ["suspended", "Sleeping until 2027-01-16 08:02:00 (in 23h"],
    "hook": ["Waiting on hook `approve:order-3`", "No timer: only a message"],
    "parent": ["Waiting on child run wrun_", ".0 (it is suspended)"],
    "child": ["Sleeping until 2027-01-16 08:04:00", "parent wrun_"],
    "retrying": [
        "Retrying step 'quote': attempt 2 of 5 at 2027-01-15 08:15:00 (in 5m00s)",
        "attempt 1 failed with wf.RetryableError: rate limited by the quote service",
    ],
    "failed": [
        "Failed in step 'charge' after 3 attempt(s) with error "
        "tests.cli.tui.flows.CardDeclined: card declined for order-6"
    ],
    "cancelled": ["cancelled", "Cancelled after"],
    "pending": ["Queued, not started yet"],
    "orphan": [
        "Driver process gone: nobody holds this run's lock. A worker will recover it",
        "Was running step 'pack'",
    ],
    "running": ["Running step 'pack' for"],
}


async def test_the_header_says_why_the_run_is_where_it_is(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        for state, expected in EXPLANATIONS.items():
            app.open_run(runs[state])
            await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
            text = header(app)
            assert runs[state] in text
            for part in expected:
                assert part in text, (state, text)
            assert "Driver process gone" not in text or state == "orphan"
            app.pop_screen()  # what escape does (tested below), without waiting for idle


async def test_tabs_show_steps_events_values_and_hooks(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine, run_id=runs["hook"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        steps = app.screen.query_one("#steps-table", DataTable)
        assert [[str(c) for c in steps.get_row_at(i)[1:3]] for i in range(steps.row_count)] == [
            ["hook", "approve:order-3"],
            ["step", "reserve"],
        ]
        await pilot.press("2")
        events = app.screen.query_one("#events-table", DataTable)
        types = [str(events.get_row_at(i)[2]) for i in range(events.row_count)]
        assert types[0] == "run_started" and types[-1] == "run_suspended"
        # Every event reads as words, hook bookkeeping too (never the raw event JSON).
        said = {
            str(events.get_row_at(i)[2]): str(events.get_row_at(i)[3]) for i in range(len(types))
        }
        assert said["hook_waiting"].startswith("waits for the next payload on the hook of op ")
        assert said["hook_waiting"].endswith("(type Approval)")
        assert not [line for line in said.values() if line.startswith("{")], said
        assert app.focused is events
        await pilot.press("enter")  # the event's JSON in a pop-up
        assert isinstance(app.screen, DetailScreen)
        await pilot.press("escape")
        await pilot.press("4")
        hooks = app.screen.query_one("#hooks-table", DataTable)
        assert str(hooks.get_row_at(0)[0]) == "approve:order-3"
        assert str(hooks.get_row_at(0)[5]) == "tests.cli.tui.flows:Approval"
        await pilot.press("3")
        tree = app.screen.query_one(ValuesTree)
        labels = [str(node.label) for node in tree.root.children]
        assert labels == ["input", "output: none yet"]


async def test_a_step_row_opens_its_errors_and_tracebacks(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine, run_id=runs["failed"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("down", "enter")  # op 1: charge
        assert isinstance(app.screen, DetailScreen)
        body = str(app.screen.query_one("Static").render())
        assert "attempt 1 (retried): tests.cli.tui.flows.CardDeclined" in body
        assert "attempt 3 (final)" in body
        assert "Traceback" in body


async def test_child_and_parent_links_navigate(engine: Engine, runs: dict[str, str]) -> None:
    app = InspectApp(engine, run_id=runs["parent"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("5")
        family = app.screen.query_one("#runs-table", DataTable)
        assert family.get_row_at(0)[:2] == ["child", runs["child"]]
        await pilot.press("enter")
        await until(pilot, lambda: getattr(app.screen, "run_id", None) == runs["child"])
        await until(pilot, lambda: app.screen.view is not None)  # type: ignore[attr-defined]
        await pilot.press("u")  # up to the parent
        await until(pilot, lambda: getattr(app.screen, "run_id", None) == runs["parent"])
        await pilot.press("escape", "escape")
        assert app.screen.run_id == runs["parent"]  # type: ignore[attr-defined]
        await pilot.press("escape")
        assert not isinstance(app.screen, RunScreen)


async def test_large_values_start_collapsed_and_expand_lazily(engine: Engine) -> None:
    from tests.cli.tui.flows import fixed_id, ship

    run = await engine.start(ship, ("big",), {}, run_id=fixed_id(1_800_000_000.0, 99))
    await run.result()
    app = InspectApp(engine, run_id=run.id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        tree = app.screen.query_one(ValuesTree)
        big: dict[str, Any] = {"rows": list(range(SHOWN + 50)), "id": "x"}
        tree.show({"input": None, "output": big, "error": None, "status": "completed"})
        await pilot.pause()
        output = tree.root.children[1]
        rows = output.children[0]
        assert str(rows.label) == f"rows: [{SHOWN + 50} items]"
        assert not rows.is_expanded and not rows.children  # built only when opened
        rows.expand()
        await pilot.pause()
        assert len(rows.children) == SHOWN + 1
        assert str(rows.children[-1].label).startswith("… 50 more")


@pytest.mark.parametrize("run_id", ["wrun_nope"])
async def test_an_unknown_run_says_so(engine: Engine, run_id: str) -> None:
    app = InspectApp(engine, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "no run with id" in header(app))


def test_the_retry_limit_is_shown_when_the_journal_records_it() -> None:
    from wf.admin import Explanation, Reason
    from wf.cli.tui._why import lines

    retrying = Reason(
        "retrying", "warn", op=0, name="quote", attempt=2, max_attempts=5,
        at=1_800_000_060.0, error={"type": "OSError", "message": "down"},
    )  # fmt: skip
    [line] = lines(Explanation("running", (retrying,)), 1_800_000_000.0)
    assert line.text == (
        "Retrying step 'quote': attempt 3 of 5 at 2027-01-15 08:01:00 (in 1m00s); "
        "attempt 2 failed with OSError: down"
    )


async def test_p_checks_that_the_code_here_still_replays_the_run(
    engine: Engine, runs: dict[str, str]
) -> None:
    """Opt-in, like ``wf inspect --replay``: it imports the workflow's module."""
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        app.open_run(runs["completed"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        assert "replay against the current code" not in header(app)
        await pilot.press("p")
        await until(pilot, lambda: "replay against the current code: ok" in header(app))


async def test_the_header_shows_the_recoveries_of_a_stalled_run(engine: Engine) -> None:
    from tests.engine.test_stalled import stall

    run_id = await stall(engine)
    app = InspectApp(engine, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        text = header(app)
        assert "recovered 2× from a dead driver" in text
        assert (
            "its driving process died in step 'hang' (op 1), 2 time(s) in a row without "
            "progress; the run failed stalled" in text
        )


class _Unreadable(MemoryStore):
    """A store whose runs' records cannot be read (as damaged files would be)."""

    async def get_run(self, run_id: str) -> RunRecord:
        raise StoreCorrupted(f"run {run_id}: its record is not valid JSON")


async def test_a_damaged_run_says_so_and_the_app_goes_on() -> None:
    app = InspectApp(Engine(_Unreadable()), run_id="wrun_damaged")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "this run cannot be read" in header(app))
        assert "wf store verify" in header(app)
        assert app.is_running


async def test_opening_a_run_reads_it_once_and_a_long_one_shows_its_latest_steps(
    engine: Engine, runs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of 30,000 steps took 8 s to open: it was read and laid out three times (the
    mount, the first live round, the first "resume"), with every step in the table."""
    from wf.cli.tui import _rows
    from wf.cli.tui import _run as run_module

    loads: list[str] = []
    real = run_module.load_run

    async def counted(*args: Any, **kwargs: Any) -> Any:
        loads.append(args[1])
        return await real(*args, **kwargs)

    monkeypatch.setattr(run_module, "load_run", counted)
    monkeypatch.setattr(_rows, "MAX_STEPS", 1)
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        app.open_run(runs["failed"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.pause()
        assert loads == [runs["failed"]]
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.view is not None
        table = app.screen.query_one("#steps-table", DataTable)
        assert table.row_count == 1  # the latest operation
        assert len(screen.view.data["steps"]) > 1
