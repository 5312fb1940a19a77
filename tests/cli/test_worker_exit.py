"""``wf worker`` always ends once it stopped, whatever code in its runs left behind: threads a
step started (non-daemon ones, which the interpreter waits for at exit) are named in one line
and left after the ``--grace``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Project


def spawn_logged(project: Project, *args: str) -> tuple[subprocess.Popen[str], Path]:
    """``wf ARGS`` as a subprocess whose stderr goes to a file (read while it runs)."""
    err = project.root / "worker.err"
    with err.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wf", *args],
            cwd=project.root,
            env=project.env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            text=True,
        )
    return proc, err


def finished(proc: subprocess.Popen[str], timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:  # it did not end: the fault under test
            proc.kill()
            proc.wait(timeout=15)


def test_until_idle_ends_after_the_grace_although_a_step_left_a_thread(project: Project) -> None:
    queued = project.wf("run", "tests.cli.exit_flows:spawner", "--id", "sp", "--detach")
    assert queued.returncode == 0, queued.stderr
    proc, err = spawn_logged(project, "worker", "--until-idle", "--grace", "0.5")
    assert finished(proc, 20) == 0, err.read_text()
    said = [line for line in err.read_text().splitlines() if "thread" in line]
    assert len(said) == 1, err.read_text()
    assert "'lib-pool'" in said[0] and "0.5 s" in said[0], said
    assert project.status("sp") == "completed"


def test_a_second_signal_ends_a_worker_waiting_for_such_a_thread_with_130(
    project: Project,
) -> None:
    queued = project.wf("run", "tests.cli.exit_flows:spawner", "--id", "sp", "--detach")
    assert queued.returncode == 0, queued.stderr
    proc, err = spawn_logged(project, "worker", "--grace", "60", "--poll", "0.2")
    try:
        project.wait_for(lambda: project.status("sp") == "completed")
        proc.send_signal(signal.SIGTERM)
        project.wait_for(lambda: "'lib-pool'" in err.read_text())
        proc.send_signal(signal.SIGTERM)
    finally:
        code = finished(proc, 20)
    assert code == 130, err.read_text()
    assert "Traceback" not in err.read_text()
