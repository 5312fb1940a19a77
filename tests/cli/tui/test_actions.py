"""Actions from the keyboard: cancel, wake, resume a hook with a typed payload, copy the id.

Each action asks first (or, for a payload, is the prompt's submission) and reports in a toast;
the runs really change, through the public API on the app's engine.
"""

from __future__ import annotations

from textual.widgets import Input, Static

from tests.cli.tui.conftest import SIZE, header, until, until_async
from wf import Engine
from wf.cli.tui._app import InspectApp
from wf.cli.tui._prompts import ConfirmScreen, PayloadScreen
from wf.cli.tui._run import RunScreen


async def status(engine: Engine, run_id: str) -> str:
    return (await engine.store.get_run(run_id)).status.value


async def open_run(app: InspectApp, pilot: object, run_id: str) -> None:
    app.open_run(run_id)
    await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)  # type: ignore[arg-type]


async def test_cancel_asks_then_cancels_and_the_header_follows(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await open_run(app, pilot, runs["sleeping"])
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # changed my mind
        assert await status(engine, runs["sleeping"]) == "suspended"
        await pilot.press("c", "y")
        await until(pilot, lambda: "Cancelled after" in header(app))
        assert await status(engine, runs["sleeping"]) == "cancelled"
        assert "cancel requested" in header(app)
        assert any("cancellation of" in n.message for n in app._notifications)
        await pilot.press("c")  # an ended run cannot be cancelled: the key is disabled
        assert isinstance(app.screen, RunScreen)


async def test_cancel_from_the_runs_table(engine: Engine, runs: dict[str, str]) -> None:
    app = InspectApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("s", "s")  # suspended runs; the newest is the retrying one
        await pilot.press("c", "y")

        async def cancelled() -> bool:
            return await status(engine, runs["retrying"]) == "cancelled"

        await until_async(pilot, cancelled)


async def test_wake_ends_a_sleep_and_the_run_completes(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine, run_id=runs["sleeping"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("w", "y")
        await until(pilot, lambda: "Completed in" in header(app))
        assert (await engine.store.get_run(runs["sleeping"])).output == "reminded"


async def test_resume_a_hook_with_a_typed_payload_validated_first(
    engine: Engine, runs: dict[str, str]
) -> None:
    app = InspectApp(engine, run_id=runs["hook"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("r")
        assert isinstance(app.screen, PayloadScreen)
        prompt = app.screen
        error = prompt.query_one("#error", Static)
        field = prompt.query_one("#payload", Input)
        assert "payload type: tests.cli.tui.flows:Approval" in str(
            prompt.query("Static")[1].render()
        )
        await pilot.press(*"{oops", "enter")
        assert str(error.render()).startswith("Not JSON:")
        field.value = '{"approved": "maybe", "by": 7}'
        await pilot.press("enter")
        assert str(error.render()).startswith("Refused: ")  # the HookError, shown
        assert "approved" in str(error.render())
        assert app.screen is prompt
        field.value = '{"approved": true, "by": "ada"}'
        await pilot.press("enter")
        assert isinstance(app.screen, RunScreen)
        await until(pilot, lambda: "Completed in" in header(app))
        assert (await engine.store.get_run(runs["hook"])).output == "approved"
        await pilot.press("r")  # no live hook any more
        assert isinstance(app.screen, RunScreen)


async def test_copy_the_run_id(engine: Engine, runs: dict[str, str]) -> None:
    app = InspectApp(engine, run_id=runs["failed"])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        await pilot.press("y")
        assert app.clipboard == runs["failed"]
        await pilot.press("escape", "down", "y")  # from the table: the row under the cursor
        assert app.clipboard == runs["orphan"]
