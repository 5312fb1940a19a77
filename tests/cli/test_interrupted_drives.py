"""A drive a person or the program ended on purpose is no death of its run: Ctrl-C or SIGTERM
of ``wf run``, a program that returns while its run is in a step, a worker whose ``--grace``
ran out. The run's limit of deaths in a row (``max_recoveries``, here 1: ``fragile``) must not
fail it with ``wf.RunStalled``. A SIGKILL still counts. Real processes, real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.cli.conftest import REPO, Project

pytestmark = pytest.mark.timeout(120)


def step_started(project: Project) -> bool:
    return "start" in project.lines("steps")


def finish(project: Project, run_id: str) -> dict[str, object]:
    """Let the step end, drive what is due with a worker; the run as it ended."""
    (project.log / "hold").unlink()
    worker = project.wf("worker", "--until-idle", "--poll", "0.2")
    assert worker.returncode == 0 or "stalled" in worker.stderr, worker.stderr
    return dict(project.gather(run_id)["run"])


def events(project: Project, run_id: str) -> list[dict[str, object]]:
    return list(project.gather(run_id)["events"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_of_wf_run_is_no_death(project: Project, sig: signal.Signals) -> None:
    (project.log / "hold").touch()
    proc = project.spawn("run", "tests.cli.interrupt_flows:fragile", "--id", "intr")
    project.wait_for(lambda: step_started(project))
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert out == ""
    assert "interrupted: run intr continues durably" in err, err
    assert "Traceback" not in err
    run = finish(project, "intr")
    assert (run["status"], run["output"]) == ("completed", "done"), run
    [note] = [e for e in events(project, "intr") if e["type"] == "drive_failed"]
    assert note["reason"] == "interrupted", note
    inspected = project.cli("inspect", "intr")
    assert "drive interrupted on purpose (no death)" in inspected.stdout, inspected.stdout


def test_a_sigkill_of_wf_run_still_counts_as_a_death(project: Project) -> None:
    (project.log / "hold").touch()
    proc = project.spawn("run", "tests.cli.interrupt_flows:fragile", "--id", "dead")
    project.wait_for(lambda: step_started(project))
    proc.kill()
    proc.communicate(timeout=30)
    run = finish(project, "dead")
    assert run["status"] == "failed", run
    assert "wf.RunStalled" in str(run["error"]), run


def test_a_program_that_returns_while_its_run_is_in_a_step_is_no_death(project: Project) -> None:
    """``await wf.start(...)`` drives the run in the program; ``asyncio.run`` cancels that
    drive when the program returns."""
    (project.log / "hold").touch()
    program = subprocess.run(
        [sys.executable, "-m", "tests.cli.interrupt_flows", "prog"],
        cwd=project.root,
        env={**project.env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert program.returncode == 0, program.stderr
    assert program.stdout.strip() == "prog"
    assert "Traceback" not in program.stderr, program.stderr
    assert project.status("prog") == "running"  # left due, for a worker
    run = finish(project, "prog")
    assert (run["status"], run["output"]) == ("completed", "done"), run


@pytest.mark.parametrize("how", ["result", "drive"])
def test_ctrl_c_of_a_program_waiting_for_its_run_is_no_death(project: Project, how: str) -> None:
    """``asyncio.run(main())`` whose main awaits ``run.result()``, or the drive task itself
    (cancelled with main by ``asyncio.run``'s Ctrl-C: it was counted as a death, so the next
    start of the program failed the run with ``wf.RunStalled``). The KeyboardInterrupt
    reaches the program, with no noise of wf's tasks, and the next start finishes the run."""
    (project.log / "hold").touch()
    command = [sys.executable, "-m", "tests.cli.interrupt_flows", "prog", how]
    env = {**project.env, "PYTHONPATH": str(REPO)}
    program = subprocess.Popen(
        command,
        cwd=project.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        project.wait_for(lambda: step_started(project))
        program.send_signal(signal.SIGINT)
        out, err = program.communicate(timeout=30)
    finally:
        if program.poll() is None:
            program.kill()
            program.communicate()
    assert program.returncode == -signal.SIGINT, err  # Python's exit for a KeyboardInterrupt
    assert out == "" and err.rstrip().endswith("KeyboardInterrupt"), err
    for noise in ("Task was destroyed", "Exception ignored", "never retrieved", "wf: "):
        assert noise not in err, err
    [note] = [e for e in events(project, "prog") if e["type"] == "drive_failed"]
    assert note["reason"] == "interrupted", note
    (project.log / "hold").unlink()
    again = subprocess.run(
        command, cwd=project.root, env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "done"
    assert project.lines("steps").count("end") == 1


@pytest.mark.parametrize("flow", ["fragile", "fragile_sync"])
def test_a_worker_whose_grace_ran_out_leaves_no_death(project: Project, flow: str) -> None:
    """An async step is cancelled and its run suspended (progress); a sync step's thread runs
    on, and the worker leaves it (``os._exit``) once its drive ended."""
    (project.log / "hold").touch()
    (project.log / "hold_0").touch()
    queued = project.wf("run", f"tests.cli.interrupt_flows:{flow}", "--id", "g", "--detach")
    assert queued.returncode == 0, queued.stderr
    worker = project.spawn("worker", "--grace", "0.3", "--poll", "0.2")
    project.wait_for(lambda: any(x.startswith("start") for x in project.lines("steps")))
    worker.send_signal(signal.SIGTERM)
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "abandoned" in err, err
    (project.log / "hold_0").unlink()
    run = finish(project, "g")
    assert run["status"] == "completed", run


def test_a_second_ctrl_c_exits_at_once_while_the_drive_ends(project: Project) -> None:
    """The first Ctrl-C ends the drive (up to 2 s: here a step that ignores its cancellation
    holds it); a second one meanwhile exits at once (it was asyncio's: it waited for that
    step)."""
    (project.log / "deaf").touch()
    proc = project.spawn("run", "tests.cli.flows:deaf_flow", "--id", "deaf")
    try:
        project.wait_for(lambda: "start deaf" in project.lines("steps"))
        proc.send_signal(signal.SIGINT)
        assert proc.stderr is not None
        said = ""
        while "interrupted:" not in said:  # bounded by the test's timeout
            said += proc.stderr.readline()
        project.wait_for(lambda: "ignored a cancellation" in project.lines("steps"))
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        took = time.monotonic() - began
    finally:
        (project.log / "deaf").unlink()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, said + err
    assert "SIGINT again: exiting now" in err, said + err
    assert took < 1.5, took


def test_a_step_that_stops_its_workers_loop_still_fails_stalled(project: Project) -> None:
    """``asyncio.run`` cancels the drive as it tears down the stopped loop; the worker's own
    code had not returned: its end is a death each time (the run had stayed running for ever,
    each worker's end noted as an interruption)."""
    queued = project.wf("run", "tests.cli.interrupt_flows:loop_stopper", "--id", "p", "--detach")
    assert queued.returncode == 0, queued.stderr
    for _ in range(4):  # max_recoveries=1: the second worker fails it at the latest
        project.wf("worker", "--until-idle", "--poll", "0.2")
        if project.status("p") != "running":
            break
    run = dict(project.gather("p")["run"])
    assert run["status"] == "failed", run
    assert "wf.RunStalled" in str(run["error"]), run
    assert "interrupted" not in [e.get("reason") for e in events(project, "p")]
