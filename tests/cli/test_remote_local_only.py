"""Commands that work on the store here, not on a server, say so when ``WF_URL`` is set
(``wf worker``) or refuse (``wf check --replay``), rather than silently using the local store."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Project

FLOW = "tests.cli.flows:adder"
NOWHERE = "http://127.0.0.1:9"  # never asked: these commands do not talk to a server


def test_check_replay_with_wf_url_refuses_rather_than_check_the_store_here(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert project.cli("run", FLOW, "-i", "[1]", "-q").exit_code == 0
    monkeypatch.setenv("WF_URL", NOWHERE)
    refused = project.cli("check", "--replay", "--json")
    assert refused.exit_code == 2
    assert refused.stdout == ""
    assert refused.stderr.startswith("error: wf check --replay replays the runs of the store here")
    monkeypatch.setenv("WF_URL", "")  # unset: the store here, as the message says
    checked = project.cli("check", "--replay", "--json")
    assert checked.exit_code == 0, checked.output
    assert len(json.loads(checked.stdout)["runs"]) == 1


def test_a_worker_with_wf_url_says_it_works_on_the_store_here(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = json.loads(project.cli("run", FLOW, "-i", "[1]", "--detach", "--json").stdout)
    monkeypatch.setenv("WF_URL", NOWHERE)
    worked = project.cli("worker", "--until-idle", "-q")
    assert worked.exit_code == 0, worked.output
    (hint,) = [line for line in worked.stderr.splitlines() if line.startswith("hint:")]
    assert f"wf worker works on the store here ({project.store_dir})" in hint
    assert f"not on the server at WF_URL ({NOWHERE})" in hint
    monkeypatch.delenv("WF_URL")
    assert project.runs()[0]["id"] == started["run_id"]
    assert project.runs()[0]["status"] == "completed"
