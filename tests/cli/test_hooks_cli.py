"""``wf hook resume`` and ``wf hooks``, across processes: a worker drives the run in one process
while payloads are delivered from others.

The workflows live here so that subprocesses import them as ``tests.cli.test_hooks_cli:NAME``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest

import wf
from tests.cli.conftest import Project

HERE = "tests.cli.test_hooks_cli"


@wf.workflow
async def collect(count: int) -> list[int]:
    """Receive ``count`` integers on the hook ``collect``, in arrival order."""
    hook: wf.Hook[int] = wf.create_hook(int, token="collect")
    received: list[int] = []
    async for value in hook:
        received.append(value)
        if len(received) == count:
            break
    return received


@wf.workflow
async def claim(token: str) -> str:
    """Claim ``token``: the run that gets it waits for a payload, any other returns the owner."""
    hook: wf.Hook[str] = wf.create_hook(str, token=token)
    owner = await hook.get_conflict()
    if owner is not None:
        return f"taken by {owner.id}"
    return await hook.next()


class Positive(pydantic.BaseModel):
    """A payload its JSON schema cannot fully describe: a validator refuses negative numbers."""

    n: int

    @pydantic.field_validator("n")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 0:
            raise ValueError("n must be >= 0")
        return value


@wf.workflow
async def positive() -> int:
    hook = wf.create_hook(Positive, token="positive")
    return (await hook.next()).n


@contextlib.contextmanager
def worker(project: Project) -> Iterator[subprocess.Popen[str]]:
    """A ``wf worker`` in the background, up before the block starts, drained after it."""
    proc = project.spawn("worker", "--poll", "0.2", WF_INBOX_POLL="0.05")
    try:
        assert proc.stderr is not None
        assert "worker started" in proc.stderr.readline()
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert "Traceback" not in err, err


def hooks_json(project: Project, *args: str) -> list[dict[str, object]]:
    result = project.cli("hooks", "--json", *args)
    assert result.exit_code == 0, result.stderr
    return list(json.loads(result.stdout))


def test_approval_example_round_trip_between_processes(project: Project) -> None:
    run_id = project.cli(
        "run",
        "examples.approval:expense",
        "-i",
        '{"expense_id": "e-42", "amount": 120}',
        "--detach",
    ).stdout.strip()
    with worker(project):
        project.wait_for(lambda: project.status(run_id) == "suspended")
        [hook] = hooks_json(project)
        assert hook["token"] == "approve:e-42"
        assert hook["run_id"] == run_id
        assert hooks_json(project, "--run", run_id) == [hook]

        table = project.wf("hooks")
        assert "approve:e-42" in table.stdout and run_id in table.stdout
        assert "examples.approval:Decision" in table.stdout

        sent = project.wf(
            "hook", "resume", "approve:e-42", "--data", '{"approved": true, "by": "ada"}'
        )
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout == f"{run_id}\n"
        project.wait_for(lambda: project.status(run_id) == "completed")
    data = project.gather(run_id)
    assert data["run"]["output"] == "paid e-42 (120.0), approved by ada"
    assert data["hooks"] == []  # the token is released with the run
    assert hooks_json(project) == []


def test_payloads_arrive_in_the_order_they_were_sent(project: Project) -> None:
    run_id = project.cli("run", f"{HERE}:collect", "-i", "20", "--detach").stdout.strip()
    with worker(project):
        project.wait_for(lambda: project.status(run_id) == "suspended")
        # Sent back to back, while the worker resumes, drives and suspends the run again.
        for value in range(20):
            result = project.cli("hook", "resume", "collect", "--data", str(value))
            assert result.exit_code == 0, result.stderr
            assert result.stdout.strip() == run_id
        project.wait_for(lambda: project.status(run_id) == "completed")
    assert project.gather(run_id)["run"]["output"] == list(range(20))


def test_two_runs_race_for_one_token_exactly_one_wins_and_it_is_free_after(
    project: Project,
) -> None:
    first = project.spawn("run", f"{HERE}:claim", "-i", '"shared"', "--id", "r1", "-q", "--wait")
    second = project.spawn("run", f"{HERE}:claim", "-i", '"shared"', "--id", "r2", "-q", "--wait")

    def settled() -> bool:
        return sorted([project.status("r1") or "", project.status("r2") or ""]) == [
            "completed",
            "suspended",
        ]

    project.wait_for(settled)
    winner, loser = ("r1", "r2") if project.status("r1") == "suspended" else ("r2", "r1")
    procs = {"r1": first, "r2": second}
    out, err = procs[loser].communicate(timeout=30)
    assert procs[loser].returncode == 0, err
    assert json.loads(out) == f"taken by {winner}"  # the loser saw the conflict
    assert [h["run_id"] for h in hooks_json(project)] == [winner]

    # The winner's `wf run --wait` is still waiting for it: a payload from here completes it
    # there.
    sent = project.wf("hook", "resume", "shared", "--data", '"hello"')
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == winner
    out, err = procs[winner].communicate(timeout=30)
    assert procs[winner].returncode == 0, err
    assert json.loads(out) == "hello"

    # Once its run ended the token is free: a new run claims it and waits on it.
    assert hooks_json(project) == []
    third = project.spawn("run", f"{HERE}:claim", "-i", '"shared"', "--id", "r3", "-q", "--wait")
    project.wait_for(lambda: project.status("r3") == "suspended")
    assert project.cli("hook", "resume", "shared", "--data", '"again"').exit_code == 0
    out, err = third.communicate(timeout=30)
    assert third.returncode == 0, err
    assert json.loads(out) == "again"


def test_an_invalid_payload_is_exit_2_and_the_run_keeps_waiting(project: Project) -> None:
    run_id = project.cli(
        "run",
        "examples.approval:expense",
        "-i",
        '{"expense_id": "e-7", "amount": 5}',
        "--detach",
    ).stdout.strip()
    with worker(project):
        project.wait_for(lambda: project.status(run_id) == "suspended")
        refused = project.wf("hook", "resume", "approve:e-7", "--data", '{"by": "ada"}')
        assert refused.returncode == 2
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith("error: ") and "approved" in line  # names the missing field
        assert project.status(run_id) == "suspended"
        assert [h["token"] for h in hooks_json(project)] == ["approve:e-7"]

        accepted = project.cli("hook", "resume", "approve:e-7", "--data", '{"approved": false}')
        assert accepted.exit_code == 0, accepted.stderr
        project.wait_for(lambda: project.status(run_id) == "completed")
    assert project.gather(run_id)["run"]["output"] == "rejected by someone"


def test_data_from_a_file_or_stdin(project: Project, tmp_path: Path) -> None:
    run_id = project.cli("run", f"{HERE}:collect", "-i", "2", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert project.status(run_id) == "suspended"
    (tmp_path / "payload.json").write_text("41\n")
    assert project.cli("hook", "resume", "collect", "--data", "@payload.json").exit_code == 0
    assert project.cli("hook", "resume", "collect", "--data", "-", input="42").exit_code == 0
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert project.gather(run_id)["run"]["output"] == [41, 42]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody", "--data", "1"], "error: no live hook with token 'nobody'"),
        (["collect", "--data", "{"], "error: --data is not valid JSON"),
        (["collect", "--data", "@missing.json"], "error: cannot read --data file"),
    ],
)
def test_bad_token_or_data_is_one_line_and_exit_2(
    project: Project, args: list[str], message: str
) -> None:
    result = project.cli("hook", "resume", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(message)


def test_a_damaged_hook_is_named_on_stderr_and_the_others_listed(project: Project) -> None:
    for token in ("first", "second"):
        started = project.cli("run", f"{HERE}:claim", "--input", f'["{token}"]', "--detach")
        assert started.exit_code == 0, started.output
    with worker(project):
        for _ in range(200):
            if len(hooks_json(project)) == 2:
                break
            time.sleep(0.05)
    [path] = [p for p in (project.store_dir / "hooks").glob("*.json") if b"first" in p.read_bytes()]
    path.write_bytes(b"{not json")
    result = project.cli("hooks", "--json")
    assert result.exit_code == 0, result.stderr
    assert [hook["token"] for hook in json.loads(result.stdout)] == ["second"]
    [line] = result.stderr.splitlines()
    assert line.startswith(f"warning: hook {path.stem} is damaged and not listed: {path}")
    table = project.cli("hooks")
    assert table.exit_code == 0 and "second" in table.stdout and str(path) in table.stderr


def test_hooks_lists_nothing_or_refuses_an_unknown_run(project: Project) -> None:
    assert project.cli("hooks").stdout.strip() == "no live hooks"
    assert hooks_json(project) == []
    unknown = project.cli("hooks", "--run", "wrun_missing")
    assert unknown.exit_code == 2
    assert unknown.stderr.strip() == "error: no run with id 'wrun_missing'"


@wf.workflow
async def refuse() -> None:
    """Fails once it hears anything on the hook ``refuse``."""
    hook: wf.Hook[str] = wf.create_hook(str, token="refuse")
    raise ValueError(f"refused: {await hook.next()}")


def test_wait_returns_once_the_run_has_taken_the_payload_in(project: Project) -> None:
    """``--wait`` drives the run here (nobody else does) until it ends or waits again."""
    run_id = project.cli("run", f"{HERE}:collect", "-i", "2", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    assert project.status(run_id) == "suspended"

    first = project.cli("hook", "resume", "collect", "--data", "1", "--wait")
    assert first.exit_code == 0, first.output
    assert first.stdout.strip() == run_id
    assert f"run {run_id}: suspended (waiting for" in first.stderr  # waits for the second
    second = project.cli("hook", "resume", "collect", "--data", "2", "--wait")
    assert second.exit_code == 0 and f"run {run_id}: completed" in second.stderr
    assert project.gather(run_id)["run"]["output"] == [1, 2]


def test_a_repeat_with_the_same_key_delivers_nothing_new(project: Project) -> None:
    """``--key``: a command that failed without saying whether it delivered is run again."""
    run_id = project.cli("run", f"{HERE}:collect", "-i", "2", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    for _ in range(2):
        sent = project.cli("hook", "resume", "collect", "--data", "1", "--key", "a", "--no-wait")
        assert sent.exit_code == 0, sent.output
        assert sent.stdout.strip() == run_id
    last = project.cli("hook", "resume", "collect", "--data", "2", "--key", "b", "--wait")
    assert last.exit_code == 0 and f"run {run_id}: completed" in last.stderr
    assert project.gather(run_id)["run"]["output"] == [1, 2]
    again = project.cli("hook", "resume", "collect", "--data", "2", "--key", "b", "--no-wait")
    assert again.exit_code == 0 and again.stdout.strip() == run_id  # its run, though ended
    bad = project.cli("hook", "resume", "collect", "--data", "3", "--key", "k\u00e9")
    assert bad.exit_code == 2 and bad.stdout == ""
    [line] = bad.stderr.splitlines()
    assert "idempotency key" in line


def test_wait_is_exit_1_when_the_run_fails(project: Project) -> None:
    run_id = project.cli("run", f"{HERE}:refuse", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    result = project.cli("hook", "resume", "refuse", "--data", '"no"', "--wait")
    assert result.exit_code == 1 and result.stdout.strip() == run_id
    assert f"run {run_id}: failed: ValueError: refused: no" in result.stderr
    assert "Traceback" not in result.output


def test_wait_follows_a_run_another_process_drives(project: Project) -> None:
    run_id = project.cli("run", f"{HERE}:collect", "-i", "1", "--detach").stdout.strip()
    with worker(project):
        project.wait_for(lambda: project.status(run_id) == "suspended")
        result = project.cli("hook", "resume", "collect", "--data", "7", "--wait")
        assert result.exit_code == 0 and f"run {run_id}: completed" in result.stderr


def test_a_payload_the_run_refuses_once_stored_is_exit_2(project: Project) -> None:
    """The command cannot import the hook's type (it checks the JSON schema, which has no
    validators): the payload is stored, and the run refuses it when it takes it in."""
    run_id = project.cli("run", f"{HERE}:positive", "--detach").stdout.strip()
    assert project.cli("worker", "--until-idle").exit_code == 0
    refused = project.wf("hook", "resume", "positive", "--data", '{"n": -1}')
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout.strip() == run_id  # stored: the run is named all the same
    line = refused.stderr.splitlines()[-1]  # after the warning the run logs as it refuses it
    assert line.startswith(f"error: run {run_id} refused the payload:"), refused.stderr
    assert "n must be >= 0" in line
    assert project.status(run_id) == "suspended"
    accepted = project.wf("hook", "resume", "positive", "--data", '{"n": 3}')
    assert accepted.returncode == 0, accepted.stderr
    assert project.gather(run_id)["run"]["output"] == 3
