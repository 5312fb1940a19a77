"""What the remote client sends and how it reports the server's refusals: bodies with lone
surrogates, bodies over the server's limit, control of runs a ``--no-worker`` server has not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import wf
from tests.serve.conftest import Served, env_for, spawn_server, stop
from wf._remote import RemoteClient


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A ``wf serve --no-worker``: runs it is asked to start stay queued."""
    server = spawn_server(env_for(tmp_path_factory.mktemp("served")), "--no-worker")
    try:
        yield server
    finally:
        stop(server)


def test_a_body_is_compact_utf8_json_and_a_lone_surrogate_its_escape() -> None:
    from wf._remote import json_body

    assert json_body({"a": "é", "n": [1, None]}) == '{"a":"é","n":[1,null]}'.encode()
    assert json_body({"a": "x\ud800é"}) == b'{"a":"x\\ud800\\u00e9"}'
    assert json.loads(json_body(["x\ud800"])) == ["x\ud800"]
    with pytest.raises(ValueError):
        json_body(float("nan"))


def test_a_lone_surrogate_travels_to_the_server(served: Served) -> None:
    inputs = []
    for url in (served.url, ""):  # stored as the local store stores it
        args = ("run", "tests.serve.flows:approval", "--input", '"x\\ud800"', "--detach")
        started = served.wf(*args, WF_URL=url)
        assert started.returncode == 0, started.stderr
        shown = json.loads(served.wf("inspect", started.stdout.strip(), "--json").stdout)
        inputs.append(shown["run"]["input"])
    assert inputs[0] == inputs[1]
    # No hook has this token (nobody drives the run): the hook's error, not an encoding one.
    resumed = served.wf("hook", "resume", "nosuch", "--data", '"a\\ud800"', WF_URL=served.url)
    assert resumed.returncode == 2, resumed.stderr
    assert "UnicodeEncodeError" not in resumed.stderr

    async def resume() -> None:
        await RemoteClient(served.url).resume_hook("nosuch", {"v": "a\ud800"})

    import asyncio

    with pytest.raises(wf.HookError):
        asyncio.run(resume())


def test_a_body_over_the_servers_limit_is_bad_input(served: Served, tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps(["x" * (2 << 20)]))
    for args in (
        ["run", "tests.serve.flows:approval", "--detach", "--input", f"@{big}"],
        ["hook", "resume", "tok", "--data", f"@{big}"],
    ):
        done = served.wf(*args, WF_URL=served.url)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert "at most 1048576 bytes (1 MiB)" in done.stderr, done.stderr


def test_control_of_a_run_that_is_not_live_says_nothing_of_workers(served: Served) -> None:
    ended = served.wf("run", "tests.serve.flows:adder", "--input", "[1, 2]", "--json")
    ended_id = json.loads(ended.stdout)["run_id"]
    for verb in ("cancel", "wake"):
        missing = served.wf(verb, "nosuch", WF_URL=served.url)
        assert missing.returncode == 2
        assert "hint" not in missing.stderr, missing.stderr
        done = served.wf(verb, ended_id, WF_URL=served.url)
        assert "has already ended" in done.stderr, done.stderr
        assert "hint" not in done.stderr, done.stderr


def test_logs_of_a_step_the_run_has_not_is_the_same_error_over_http(served: Served) -> None:
    talked = served.wf("run", "tests.serve.flows:talker", "--input", '"ada"', "--json")
    run_id = json.loads(talked.stdout)["run_id"]
    for step in ("chatty", "nosuch", "", "\x1b"):
        here = served.wf("logs", run_id, "--step", step)
        there = served.wf("logs", run_id, "--step", step, WF_URL=served.url)
        assert (here.returncode, here.stdout, here.stderr) == (
            there.returncode,
            there.stdout,
            there.stderr,
        ), step
        assert here.returncode == (0 if step == "chatty" else 2), here.stderr
