"""The CLI's read commands print the same JSON from the store here and from a ``wf serve``
of that store (``WF_URL``): both go through ``wf.admin``'s one client.

The server is a real process; the read commands compared run in this process (typer's
CliRunner, the environment each would have), since what is compared is their output, not an
interpreter's start: about 60 of them as subprocesses took 50 s of the suite."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.serve.conftest import REPO, Served, env_for, spawn_server, stop
from wf.cli._app import build_app


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = spawn_server(env_for(tmp_path))
    try:
        yield server
    finally:
        stop(server)


def in_process(
    served: Served, args: tuple[str, ...], **env: str
) -> subprocess.CompletedProcess[str]:
    """``wf ARGS`` run here with the server's store (``WF_DIR``) and no ``WF_URL``, or ``env``
    over them: what ``served.wf`` does, without an interpreter's start."""
    variables: dict[str, str | None] = {"WF_URL": None, "WF_TOKEN": None}
    variables["WF_DIR"] = served.env["WF_DIR"]
    variables.update(env)
    result = CliRunner().invoke(build_app(), list(args), env=variables, catch_exceptions=False)
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def test_every_read_command_prints_the_same_json_locally_and_over_http(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Over HTTP the store here is another, empty one: a command that read it instead of
    # asking the server would print something else.
    elsewhere = str(tmp_path / "elsewhere" / ".workflows")
    monkeypatch.chdir(REPO)  # where served.wf runs its commands

    def remotely(*args: str) -> subprocess.CompletedProcess[str]:
        return in_process(served, args, WF_URL=served.url, WF_DIR=elsewhere)

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return in_process(served, args)

    def started(*args: str) -> str:
        done = served.wf("run", *args, WF_URL=served.url, WF_DIR=elsewhere)
        assert done.returncode in (0, 1), done.stderr
        return done.stdout.strip()

    added = started("tests.serve.flows:adder", "--input", "[1, 2]", "--json")
    added_id = json.loads(added)["run_id"]
    failed = started("tests.serve.flows:failing", "--input", '"boom"', "--json")
    failed_id = json.loads(failed)["run_id"]
    talked = started("tests.serve.flows:talker", "--input", '"ada"', "--json")
    talked_id = json.loads(talked)["run_id"]
    waiting_id = started("tests.serve.flows:approval", "--input", '"cmp"', "--detach")
    deadline = time.monotonic() + 60
    while json.loads(remotely("inspect", waiting_id, "--json").stdout)["run"]["status"] != (
        "suspended"
    ):
        assert time.monotonic() < deadline, "the run never suspended on its hook"
        time.sleep(0.05)

    made = served.wf(
        "schedule",
        "set",
        "yearly",
        "tests.serve.flows:adder",
        "--cron",
        "0 0 1 1 *",
        "--input",
        "[1, 2]",
        "--tz",
        "Europe/Paris",
        "--json",
        WF_URL=served.url,
        WF_DIR=elsewhere,
    )
    assert made.returncode == 0, made.stderr
    reads = [
        ["runs", "--json"],
        ["runs", "--json", "--status", "failed", "--status", "completed", "--limit", "2"],
        ["runs", "--json", "--status", "failed"],
        ["runs", "--json", "--workflow", "tests.serve.flows:adder", "--limit", "1"],
        ["runs", "--json", "--search", "ADDER"],
        ["runs", "--json", "--search", failed_id],
        ["runs", "--json", "--search", added_id[-6:]],
        ["runs", "--json", "--search", "flows", "--before", talked_id],
        ["inspect", "--json"],
        ["inspect", added_id, "--json"],
        ["inspect", failed_id, "--json"],
        ["inspect", waiting_id, "--json"],
        ["hooks", "--json"],
        ["hooks", "--json", "--run", waiting_id],
        ["logs", talked_id, "--json"],
        ["logs", talked_id, "--json", "--step", "chatty"],
        ["watch", added_id, "--json"],
        ["watch", failed_id, "--json"],
        ["schedules", "--json"],
        ["store", "info", "--json"],
        ["store", "verify", "--json"],
        ["deployments", "--json"],
        ["gc", "--older-than", "0s", "--dry-run", "--json"],
    ]
    for args in reads:
        mine, there = here(*args), remotely(*args)
        assert (mine.returncode, there.returncode) == (0, 0), (args, mine.stderr, there.stderr)
        assert json_of(mine.stdout) == json_of(there.stdout), args
    streamed_id = json.loads(started("tests.serve.flows:streaming", "--input", "[2]", "--json"))[
        "run_id"
    ]
    for args in (["stream", streamed_id], ["stream", streamed_id, "--start", "-1"]):
        mine, there = here(*args), remotely(*args)
        assert (mine.returncode, mine.stdout) == (there.returncode, there.stdout), args
    mine, there = here("stream", streamed_id, "nope"), remotely("stream", streamed_id, "nope")
    assert mine.returncode != 0
    assert (mine.returncode, mine.stderr) == (there.returncode, there.stderr)
    removed = remotely("schedule", "rm", "yearly")
    assert removed.returncode == 0, removed.stderr
    assert json_of(here("schedules", "--json").stdout) == []
    missing = "wrun_00000000000000000000000000"
    for args in (
        ["inspect", missing, "--json"],
        ["logs", missing],
        ["hooks", "--run", missing],
        ["schedule", "rm", "yearly"],
    ):
        mine, there = here(*args), remotely(*args)
        assert (mine.returncode, there.returncode) == (2, 2), args
        assert mine.stderr == there.stderr, args


def json_of(text: str) -> object:
    """A command's JSON output: one document, or one per line."""
    lines = text.splitlines()
    if len(lines) > 1 and all(line.startswith("{") for line in lines):
        return [json.loads(line) for line in lines]
    return json.loads(text) if text.strip() else None


def test_wf_run_sends_its_run_options_over_http(served: Served, tmp_path: Path) -> None:
    elsewhere = str(tmp_path / "elsewhere" / ".workflows")

    def remotely(*args: str) -> subprocess.CompletedProcess[str]:
        return served.wf(*args, WF_URL=served.url, WF_DIR=elsewhere)

    options = ["--delay", "2h", "--priority", "9", "--group", "g", "--max-attempts", "3"]
    queued = []
    for wf in (served.wf, remotely):
        done = wf("run", "tests.serve.flows:adder", "--input", "[1, 2]", *options)
        assert done.returncode == 0, done.stderr
        shown = json.loads(served.wf("inspect", done.stdout.strip(), "--json").stdout)
        run, queue = shown["run"], shown["queue"]
        queued.append((run["status"], queue["due_at"] is not None, queue["priority"]))
        queued[-1] += (queue["group"], run["max_attempts"])
    assert queued[0] == queued[1] == ("pending", True, 9, "g", 3)
    made = served.wf("run", "tests.serve.flows:adder", "--input", "[1, 2]", "--id", "u1", "-d")
    assert made.returncode == 0, made.stderr
    unique = ["run", "tests.serve.flows:adder", "--input", "[1, 2]", "--id", "u1", "--unique"]
    here, there = served.wf(*unique, "-d"), remotely(*unique, "-d")
    assert (here.returncode, here.stdout) == (there.returncode, there.stdout) == (2, "")
    assert here.stderr == there.stderr
    assert "run 'u1' exists already (unique start)" in here.stderr


def test_waiting_on_a_server_that_does_not_drive_says_so_and_ends_as_locally(
    tmp_path: Path,
) -> None:
    import select
    import sys

    from tests.serve.conftest import REPO

    server = spawn_server(env_for(tmp_path), "--no-worker")
    try:
        failed = server.wf("run", "tests.serve.flows:failing", "--input", '"boom"', "--json")
        failed_id = json.loads(failed.stdout)["run_id"]
        waiting = server.wf("run", "tests.serve.flows:approval", "--input", '"nw"')
        waiting_id = waiting.stdout.strip()
        assert waiting.returncode == 0 and waiting_id, waiting.stderr
        env = {**server.env, "WF_URL": server.url}
        commands = [
            ["retry", failed_id, "--json"],
            ["hook", "resume", "approve:nw", "--data", '{"approved": true, "by": "nw"}'],
        ]
        for args in commands:
            proc = subprocess.Popen(
                [sys.executable, "-m", "wf", *args],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert proc.stderr is not None
                # Said before the wait, not after (bounded: without it the command waits).
                assert select.select([proc.stderr], [], [], 30)[0], "no note within 30 s"
                note = proc.stderr.readline()
                assert "does not drive runs (wf serve --no-worker)" in note, note
                assert proc.poll() is None  # waiting: nothing drove the run
                worker = server.wf("worker", "--until-idle")
                assert worker.returncode == 0, worker.stderr
                out, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            if args[0] == "retry":
                assert proc.returncode == 1
                assert json.loads(out)["status"] == "failed"
            else:
                assert (proc.returncode, out.strip()) == (0, waiting_id)
                assert f"run {waiting_id}: completed" in err
    finally:
        stop(server)


def test_a_deleted_run_and_damaged_items_are_said_alike_locally_and_over_http(
    served: Served, tmp_path: Path
) -> None:
    from tests.store.helpers import damage_local_run
    from wf.store.local import LocalStore

    elsewhere = str(tmp_path / "elsewhere" / ".workflows")

    def remotely(*args: str) -> subprocess.CompletedProcess[str]:
        return served.wf(*args, WF_URL=served.url, WF_DIR=elsewhere)

    adder = ["tests.serve.flows:adder", "--input", "[1, 2]"]
    made = served.wf("run", *adder, "--id", "gone-1")
    assert made.returncode == 0, made.stderr
    gone = served.wf("gc", "--older-than", "0s")
    assert gone.returncode == 0, gone.stderr
    for run_id in ("bad-1", "kept-1"):
        again = served.wf("run", *adder, "--id", run_id)
        assert again.returncode == 0, again.stderr
    # A deleted run's id: never run again, and said so the same way.
    start = ["run", *adder, "--id", "gone-1", "--detach"]
    here, there = served.wf(*start), remotely(*start)
    assert (here.returncode, there.returncode) == (2, 2), (here.stderr, there.stderr)
    assert "run 'gone-1' was deleted by wf gc at" in here.stderr
    assert here.stderr == there.stderr
    damage_local_run(LocalStore(str(tmp_path / ".workflows")), "bad-1")
    for args in (["gc", "--older-than", "0s", "--dry-run"], ["deployments", "--json"]):
        here, there = served.wf(*args), remotely(*args)
        assert (here.returncode, there.returncode) == (0, 0), (args, here.stderr, there.stderr)
        assert "bad-1 is damaged" in here.stderr, args
        assert here.stderr == there.stderr, args
