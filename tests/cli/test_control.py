"""``wf cancel`` and ``wf wake``: pending, suspended and finished runs, unknown ids."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Project


def test_cancel_a_pending_run_waits_until_it_is_cancelled(project: Project) -> None:
    run_id = project.cli("run", "tests.cli.flows:sleeper", "-i", "60", "--detach").stdout.strip()
    result = project.cli("cancel", run_id)
    assert result.exit_code == 0, result.stderr
    assert f"run {run_id}: cancelled" in result.stderr
    assert project.status(run_id) == "cancelled"

    again = project.cli("cancel", run_id)
    assert again.exit_code == 0
    assert f"run {run_id} has already ended: cancelled" in again.stderr
    assert project.cli("wake", run_id).exit_code == 0


def test_cancel_without_waiting_leaves_it_to_a_worker(project: Project) -> None:
    run_id = project.cli("run", "tests.cli.flows:sleeper", "-i", "60", "--detach").stdout.strip()
    result = project.cli("cancel", run_id, "--no-wait")
    assert result.exit_code == 0, result.stderr
    assert "cancellation of run" in result.stderr
    assert project.status(run_id) != "cancelled"
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert project.status(run_id) == "cancelled"


@pytest.mark.parametrize("command", ["cancel", "wake"])
def test_unknown_run_exits_2(project: Project, command: str) -> None:
    result = project.cli(command, "wrun_missing")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no run with id 'wrun_missing'"
    bad = project.cli(command, "../etc")
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: invalid run id")


def test_wake_a_suspended_run_while_wf_run_waits_for_it(project: Project) -> None:
    waiting = project.spawn(
        "run", "tests.cli.flows:sleeper", "-i", "600", "--id", "nap", WF_SUSPEND_AFTER="0.1"
    )
    project.wait_for(lambda: project.status("nap") == "suspended")
    assert "sleep until" in project.gather("nap")["why"]
    result = project.cli("wake", "nap")
    assert result.exit_code == 0, result.stderr
    assert "wake-up of run nap requested" in result.stderr
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert json.loads(out) == "awake"
    assert project.status("nap") == "completed"


def test_cancel_a_suspended_run_while_wf_run_waits_for_it(project: Project) -> None:
    waiting = project.spawn(
        "run", "tests.cli.flows:sleeper", "-i", "600", "--id", "nap", WF_SUSPEND_AFTER="0.1"
    )
    project.wait_for(lambda: project.status("nap") == "suspended")
    result = project.cli("cancel", "nap")
    assert result.exit_code == 0, result.stderr
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 1
    assert out == ""
    assert err.strip().splitlines()[-1] == "error: run nap was cancelled"
    assert project.status("nap") == "cancelled"
