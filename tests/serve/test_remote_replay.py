"""``wf inspect --replay`` over ``WF_URL``: the server never replays (it would import code),
and the command says so instead of printing ``replays: null`` as if it had checked; on a
terminal, ``wf inspect`` opens the app on the server's runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.serve.conftest import env_for, spawn_server, stop


def test_inspect_replay_over_wf_url_says_the_replay_was_not_done(tmp_path: Path) -> None:
    served = spawn_server(env_for(tmp_path))
    try:
        elsewhere = str(tmp_path / "elsewhere" / ".workflows")
        done = served.wf(
            "run", "tests.serve.flows:adder", "--input", "[1, 2]", "--json",
            WF_URL=served.url, WF_DIR=elsewhere,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["run_id"]
        shown = served.wf("inspect", run_id, "--replay", "--json", WF_URL=served.url)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["replays"] is None
        assert shown.stderr.startswith("hint: --replay is not done over WF_URL")
        assert served.wf("inspect", run_id, "--json", WF_URL=served.url).stderr == ""
    finally:
        stop(served)


def test_inspect_on_a_terminal_over_wf_url_opens_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminal UI renders ``wf.admin``'s client: over ``WF_URL`` it opens on the server's
    run (checked there first: an unknown id is the usual error), with nothing on stderr."""
    from typer.testing import CliRunner

    from wf.cli._app import build_app

    launched: list[str | None] = []
    monkeypatch.setattr("wf.cli._inspect._interactive", lambda: True)
    monkeypatch.setattr("wf.cli.tui.launch", launched.append)
    served = spawn_server(env_for(tmp_path))
    try:
        done = served.wf("run", "tests.serve.flows:adder", "--input", "[1, 2]", "--json")
        run_id = json.loads(done.stdout)["run_id"]
        env = {"WF_URL": served.url, "WF_DIR": str(tmp_path / "elsewhere" / ".workflows")}
        shown = CliRunner().invoke(build_app(), ["inspect", run_id], env=env)
        assert shown.exit_code == 0, shown.stderr
        assert (shown.stdout, shown.stderr) == ("", "")
        assert launched == [run_id]
        unknown = CliRunner().invoke(build_app(), ["inspect", "wrun_nosuchrun"], env=env)
        assert unknown.exit_code == 2, unknown.stderr
        assert launched == [run_id]
    finally:
        stop(served)
