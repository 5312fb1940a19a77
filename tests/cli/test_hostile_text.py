"""Recorded text is anyone's: the terminal front ends show it literally and visibly.

A run's error, a step's name, a hook token, a workflow name may hold Rich markup (``[/]``,
``[@click=...]``), escape sequences (a window title, a cleared screen), a carriage return or a
bidi override (``tests.cli.hostile_flows``). Every command prints them as text, never as markup
(``[/]`` once crashed ``wf run`` and ``wf runs``) and never raw (``\\x1b`` is shown, not sent).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from typing import Any

import pytest
from rich.console import Console

from tests.cli import hostile_flows as flows
from tests.cli.conftest import Project
from wf.cli import _progress
from wf.store import RunRecord, RunStatus

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")
"""What must never reach a terminal (tab and newline are layout)."""
SHOWN_CONTROLS = r"\x1b]0;pwned\x07 \x1b[2J safe\rEVIL back\x08"
SHOWN_BIDI = r"\u202egnp"


def assert_safe(text: str) -> None:
    assert not RAW.search(text), repr(RAW.search(text))


@pytest.fixture
def hostile(project: Project) -> dict[str, Any]:
    failed = project.cli("run", "tests.cli.hostile_flows:failing")
    waiting = project.cli("run", "tests.cli.hostile_flows:waiting")
    schedule = project.cli(
        "schedule", "set", "nightly", "tests.cli.hostile_flows:failing", "--cron", "0 3 * * *"
    )
    assert schedule.exit_code == 0, schedule.output
    ids = {run["workflow"]: run["id"] for run in project.runs()}
    return {
        "failed": ids["wf[/]name\u202e"],
        "waiting": ids["hook[/]flow"],
        "results": [failed, waiting, schedule],
    }


def test_wf_run_says_a_hostile_failure_literally(project: Project, hostile: dict[str, Any]) -> None:
    failed, waiting, schedule = hostile["results"]
    assert failed.exit_code == 1 and waiting.exit_code == 0  # no MarkupError, no crash
    for result in (failed, waiting, schedule):
        assert_safe(result.stdout)
        assert_safe(result.stderr)
    assert f"failed: ValueError: {flows.MARKUP} " in failed.stderr
    assert r"\x1b]0;pwned\x07 \x1b[2J" in failed.stderr
    assert "step 'step[/]name\\u202e' failed" in failed.stderr  # the progress lines (a pipe)
    assert "hook 'tok[/]en [@click=app.quit]x[/]\\u202e'" in waiting.stderr


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["runs"], [f"ValueError: {flows.MARKUP} {SHOWN_CONTROLS} {SHOWN_BIDI}", "hook[/]flow"]),
        (["inspect", "{failed}"], ["step 'step[/]name\\u202e'", SHOWN_CONTROLS, "wf[/]name"]),
        (["inspect", "{waiting}"], ["tok[/]en [@click=app.quit]x[/]\\u202e"]),
        (["hooks"], ["tok[/]en [@click=app.quit]x[/]\\u202e"]),
        (["schedules"], ["wf[/]name\\u202e"]),
    ],
    ids=["runs", "inspect-failed", "inspect-waiting", "hooks", "schedules"],
)
def test_listings_show_hostile_text_literally(
    project: Project, hostile: dict[str, Any], command: list[str], expected: list[str]
) -> None:
    args = [arg.format(**hostile) for arg in command]
    result = project.cli(*args)
    assert result.exit_code == 0, result.output
    assert_safe(result.stdout)
    assert_safe(result.stderr)
    for text in expected:
        assert text in result.stdout, (text, result.stdout)


def test_the_live_view_of_wf_run_shows_names_and_errors_as_text() -> None:
    # What `wf run` draws on a terminal: a step's name and error, and what the run waits on.
    sink = _progress.LiveSink()
    record = RunRecord(
        id="wrun_x",
        workflow="app:hostile",
        status=RunStatus.SUSPENDED,
        waiting_for=[{"kind": "hook", "target": flows.TOKEN, "until": None}],
    )
    error = {"type": "ValueError", "message": flows.HOSTILE}
    journal = [
        {"type": "step_started", "op": 0, "name": flows.NAME, "ts": 1.0},
        {"type": "step_failed", "op": 0, "name": flows.NAME, "ts": 2.0, "error": error},
    ]
    sink.update(record, journal, journal)
    console = Console(record=True, width=400, force_terminal=True)
    console.print(sink._render())
    text = console.export_text()
    assert "step[/]name\\u202e" in text
    assert f"ValueError: {flows.MARKUP} {SHOWN_CONTROLS}" in text
    assert "suspended: hook 'tok[/]en [@click=app.quit]x[/]\\u202e'" in text
    assert_safe(text)


def test_wf_check_shows_a_hostile_file_name(project: Project) -> None:
    (project.root / "bad\x1b]0;pwned\x07.py").write_text(
        "import random\nimport wf\n\n\n@wf.workflow\nasync def f() -> float:\n"
        "    return random.random()\n"
    )
    result = project.cli("check", ".")
    assert result.exit_code == 1, result.output
    assert "bad\\x1b]0;pwned\\x07.py:" in result.stdout
    assert_safe(result.stdout)


def test_worker_log_lines_stay_one_line_per_record(project: Project) -> None:
    queued = project.cli("run", "tests.cli.hostile_flows:forger", "--detach")
    assert queued.exit_code == 0, queued.output
    result = project.cli("worker", "--until-idle")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert not [line for line in lines if "wrun_01FAKE" in line.split(" ", 2)[1:2]]
    [failed] = [line for line in lines if "forger failed" in line]
    assert "oops\\n13:44:38 wrun_01FAKEFAKEFAKEFAKEFAKEFAKE payroll completed" in failed
    assert_safe(result.stderr)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wf_logs_shows_controls_on_a_terminal_and_writes_them_as_they_were_in_a_pipe(
    project: Project,
) -> None:
    from wf.cli._logs import _logs

    assert project.cli("run", "tests.cli.hostile_flows:chatty").exit_code == 0
    [run] = project.runs()
    terminal, pipe = _Terminal(), io.StringIO()
    asyncio.run(_logs(run["id"], None, False, False, terminal))
    asyncio.run(_logs(run["id"], None, False, False, pipe))
    assert f"out {SHOWN_CONTROLS}\n" in terminal.getvalue()
    assert_safe(terminal.getvalue())
    assert f"out {flows.CONTROLS}\n" in pipe.getvalue()  # as written (docs/cli.md)
    as_json = project.cli("logs", run["id"], "--json")
    assert json.loads(as_json.stdout.splitlines()[-1])["text"] == f"out {flows.CONTROLS}"
