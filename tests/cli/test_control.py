"""``wf cancel`` and ``wf wake``: pending, suspended and finished runs, unknown ids."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

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
    shown = json.loads(project.cli("inspect", run_id, "--json").stdout)
    assert shown["cancel_requested"] is True  # still in the inbox: shown all the same
    assert shown["run"]["cancel_requested"] is True
    assert shown["why"].endswith("; cancellation requested")
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
    # It waits for the effect, like `wf cancel`: the run woke (the process driving it may not
    # have taken the message in yet when the run is driven elsewhere).
    assert "run nap: " in result.stderr and "requested" not in result.stderr
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


def test_cancel_exits_1_when_the_run_ends_otherwise(project: Project) -> None:
    done = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", "done", "-q")
    assert done.exit_code == 0, done.stderr
    late = project.cli("cancel", "done")
    assert late.exit_code == 1
    assert "run done has already ended: completed" in late.stderr

    waiting = project.spawn("run", "tests.cli.flows:defiant", "--id", "d", WF_SUSPEND_AFTER="0.1")
    project.wait_for(lambda: project.status("d") == "suspended")
    defied = project.cli("cancel", "d")
    assert defied.exit_code == 1, defied.stderr
    assert "run d: completed" in defied.stderr
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert json.loads(out) == "ignored the cancellation"


def test_requests_from_where_the_workflow_does_not_import_are_stored_and_exit_1(
    project: Project, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A run of a file-based workflow, controlled from another directory: the request is
    stored (a worker where it imports applies it) and the command says so, exit 1."""
    (project.root / "napping.py").write_text(
        "import wf\n\n\n@wf.workflow\nasync def nap() -> str:\n"
        "    hook: wf.Hook[str] = wf.create_hook(str, token='nap-hook')\n"
        "    return await hook.next()\n"
    )
    started = project.wf("run", "napping.py:nap", "--id", "n", "--detach")
    assert started.returncode == 0, started.stderr
    elsewhere = tmp_path_factory.mktemp("elsewhere")

    def wf_elsewhere(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "wf", *args],
            cwd=elsewhere,
            env=project.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    for args, what in [
        # Queued, not yet waiting on its hook (on which a wake-up is refused: no sleep to end).
        (["wake", "n", "--wait"], "the wake-up of run n is stored"),
        (["hook", "resume", "nap-hook", "--data", '"ok"', "--wait"], "the payload for run n"),
        (["cancel", "n"], "the cancellation of run n is stored"),
    ]:
        if args[0] == "hook":
            worker = project.wf("worker", "--until-idle")  # to its hook
            assert worker.returncode == 0, worker.stderr
        result = wf_elsewhere(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert what in result.stderr and "cannot be driven here" in result.stderr
        assert "Traceback" not in result.stderr
    worker = project.wf("worker", "--until-idle")  # where it imports: every request applies
    assert worker.returncode == 0, worker.stderr
    kinds = [e["type"] for e in project.gather("n")["events"]]
    for kind in ("wake_requested", "hook_payload", "cancel_requested"):
        assert kinds.count(kind) == 1, kinds  # each stored once, none sent twice
    assert project.status("n") in ("cancelled", "completed")


def test_wake_without_waiting_returns_once_the_request_is_stored(project: Project) -> None:
    run_id = project.cli("run", "tests.cli.flows:sleeper", "-i", "600", "--detach").stdout.strip()
    result = project.cli("wake", run_id, "--no-wait")
    assert result.exit_code == 0, result.stderr
    assert f"wake-up of run {run_id} requested" in result.stderr
    assert project.status(run_id) != "completed"


def test_wake_waits_until_the_run_ends_or_waits_again(project: Project) -> None:
    run_id = project.cli("run", "tests.cli.flows:sleeper", "-i", "600", "--detach").stdout.strip()
    result = project.cli("wake", run_id)
    assert result.exit_code == 0, result.stderr
    assert project.status(run_id) in ("completed", "suspended")
    assert f"run {run_id}: " in result.stderr


def test_wake_of_a_run_waiting_on_a_hook_says_it_has_no_sleep_to_end(project: Project) -> None:
    assert project.cli("run", "tests.cli.flows:approval", "--id", "ask", "-q").exit_code == 0
    assert project.status("ask") == "suspended"
    result = project.cli("wake", "ask")
    assert result.exit_code == 1, result.stderr
    assert result.stderr.strip() == (
        "run ask has no sleep to end: it waits for hook 'approve-me': `wf hook resume "
        "approve-me --data JSON` delivers its payload; nothing sent"
    )
    # Nothing is left behind to end the run's next sleep as it starts.
    assert not any(e["type"] == "wake_requested" for e in project.gather("ask")["events"])


def _hold_segments_lock(project: Project) -> subprocess.Popen[str]:
    """Another process holding ``segments/lock`` (as a packer does) until its stdin closes."""
    lock = project.store_dir / "segments" / "lock"
    lock.parent.mkdir(exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _waiting_line(project: Project, holder: subprocess.Popen[str]) -> str:
    lock = project.store_dir / "segments" / "lock"
    return (
        f"waiting for {lock} (taken to pack, unpack or delete packed runs; held by pid "
        f"{holder.pid})\n"
    )


def test_cancel_says_once_that_it_waits_for_the_segments_lock_another_process_holds(
    project: Project,
) -> None:
    """A packer (``wf gc`` stopped with Ctrl-Z, say) holds ``segments/lock``: the cancel waits
    for it, and says so after a second, naming the lock and the holder's pid."""
    run_id = project.cli("run", "tests.cli.flows:sleeper", "-i", "60", "--detach").stdout.strip()
    holder = _hold_segments_lock(project)
    safety = threading.Timer(15, holder.kill)  # a cancel that never says it waits: bounded
    safety.start()
    try:
        cancel = project.spawn("cancel", run_id, "--no-wait")
        assert cancel.stderr is not None
        # The line comes after a second; wf ends only once the lock is free.
        assert cancel.stderr.readline() == _waiting_line(project, holder)
        assert cancel.poll() is None  # still waiting
        assert holder.stdin is not None
        holder.stdin.close()  # the holder ends, and its lock goes
        _, rest = cancel.communicate(timeout=30)
    finally:
        safety.cancel()
        holder.kill()
        holder.wait(10)
    assert cancel.returncode == 0, rest
    assert "waiting for" not in rest
    assert f"cancellation of run {run_id} requested" in rest


def test_ctrl_c_stops_a_cancel_waiting_for_the_segments_lock_at_once(project: Project) -> None:
    run_id = project.cli("run", "tests.cli.flows:sleeper", "-i", "60", "--detach").stdout.strip()
    holder = _hold_segments_lock(project)
    safety = threading.Timer(15, holder.kill)
    safety.start()
    try:
        cancel = project.spawn("cancel", run_id, "--no-wait")
        assert cancel.stderr is not None
        assert cancel.stderr.readline() == _waiting_line(project, holder)
        cancel.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, rest = cancel.communicate(timeout=30)
        assert time.monotonic() - started < 5  # not once the holder lets go
    finally:
        safety.cancel()
        holder.kill()
        holder.wait(10)
    assert cancel.returncode == 130 and rest == "interrupted\n", rest
