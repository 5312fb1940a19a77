"""``wf inspect`` chooses: the app on a terminal, a plain rendering in a pipe, JSON with --json.

The plain and JSON outputs themselves are tested in ``tests/cli/test_inspect.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli.conftest import REPO, Project


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Pretend stdin and stdout are a terminal; record app launches instead of running one."""
    calls: list[str | None] = []
    monkeypatch.setattr("wf.cli._inspect._interactive", lambda: True)
    monkeypatch.setattr("wf.cli.tui.launch", calls.append)
    return calls


def test_on_a_terminal_the_app_opens(project: Project, launched: list[str | None]) -> None:
    run_id = json.loads(
        project.cli("run", "tests.cli.flows:adder", "-i", "[1, 2]", "--json").stdout
    )["run_id"]
    assert project.cli("inspect").exit_code == 0
    assert project.cli("inspect", run_id).exit_code == 0
    assert launched == [None, run_id]


def test_json_is_printed_even_on_a_terminal(project: Project, launched: list[str | None]) -> None:
    project.cli("run", "tests.cli.flows:adder", "-i", "[1, 2]", "-q")
    result = project.cli("inspect", "--json")
    assert json.loads(result.stdout)["run"]["output"] == 3
    assert launched == []


def test_bad_targets_fail_before_the_app_loads(
    project: Project, launched: list[str | None]
) -> None:
    empty = project.cli("inspect")
    assert (empty.exit_code, empty.stderr.strip()) == (2, "error: no runs in the store")
    assert not project.store_dir.exists()  # looking never creates a store
    project.cli("run", "tests.cli.flows:adder", "-i", "[1, 2]", "-q")
    unknown = project.cli("inspect", "wrun_nope")
    assert (unknown.exit_code, unknown.stderr.strip()) == (2, "error: no run with id 'wrun_nope'")
    assert launched == []


def test_textual_is_imported_only_when_the_app_starts() -> None:
    code = (
        "import sys; from wf.cli._app import build_app; build_app(); import wf.cli.tui; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_app_on_the_local_store_resumes_a_hook(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``launch`` end to end: the local store, its file events, the actions' engine, cleanup."""
    from textual.pilot import Pilot
    from textual.widgets import Input

    from tests.cli.tui.conftest import SIZE, header, until
    from wf.cli.tui import launch
    from wf.cli.tui._app import InspectApp
    from wf.cli.tui._run import RunScreen

    run_id = project.cli("run", "tests.cli.flows:approval", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    seen: dict[str, str] = {}

    async def drive(pilot: Pilot[object]) -> None:
        app = pilot.app
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view)
        seen["before"] = header(app)
        await pilot.press("r")
        app.screen.query_one("#payload", Input).value = '"yes"'
        await pilot.press("enter")
        await until(pilot, lambda: "Completed in" in header(app), timeout=20)
        await pilot.press("q")

    original = InspectApp.run_async
    monkeypatch.setattr(
        InspectApp,
        "run_async",
        lambda app: original(app, headless=True, size=SIZE, auto_pilot=drive),
    )
    launch(run_id)
    assert "Waiting on hook `approve-me`" in seen["before"]
    assert project.gather(run_id)["run"]["output"] == "yes"
