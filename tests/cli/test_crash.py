"""Crashes and concurrency with real processes: SIGKILL mid-step and mid-workflow, Ctrl-C, and
two workers sharing one store.

Steps append ``start <i> <pid>`` / ``end <i> <pid>`` to a log file (see ``flows.work``), which
survives the kill, so the tests can count how often each step really ran.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.conftest import Project
from wf._interrupts import BLOCKED_AFTER


def starts(project: Project) -> collections.Counter[int]:
    return collections.Counter(
        int(line.split()[1]) for line in project.lines("steps") if line.startswith("start ")
    )


def completed_steps(project: Project, run_id: str) -> set[int]:
    """Indexes (in call order) of the steps whose completion is in the journal."""
    rows = [row for row in project.gather(run_id)["steps"] if row["kind"] == "step"]
    return {i for i, row in enumerate(rows) if row["status"] == "completed"}


def finish_with_worker(project: Project) -> None:
    worker = project.wf("worker", "--until-idle", "--poll", "0.2")
    assert worker.returncode == 0, worker.stderr
    assert "Traceback" not in worker.stderr


def test_sigkill_mid_step_then_a_worker_finishes_the_run(project: Project) -> None:
    (project.log / "hold_2").touch()  # step 2 blocks until this file goes away
    proc = project.spawn("run", "tests.cli.flows:chain", "-i", '{"n": 4}', "--id", "crash")
    project.wait_for(lambda: starts(project)[2] == 1)
    proc.kill()
    proc.wait()
    done = completed_steps(project, "crash")
    assert done == {0, 1}
    assert project.status("crash") == "running"  # as the dead process left it

    (project.log / "hold_2").unlink()
    finish_with_worker(project)

    data = project.gather("crash")
    assert data["run"]["status"] == "completed"
    assert data["run"]["output"] == [0, 10, 20, 30]
    assert data["run"]["resumes"] == 1
    counts = starts(project)
    assert all(counts[i] == 1 for i in done)  # a durable step never runs again
    assert counts[2] == 2  # the interrupted step ran at most once more
    assert counts[3] == 1


def test_sigkill_between_steps_then_a_worker_finishes_the_run(project: Project) -> None:
    proc = project.spawn(
        "run", "tests.cli.flows:chain", "-i", '{"n": 3, "pause": 1.0}', "--id", "crash"
    )

    def sleeping_after_two_steps() -> bool:
        rows = project.gather("crash")["steps"] if project.status("crash") else []
        return [(r["kind"], r["status"]) for r in rows][:4] == [
            ("step", "completed"),
            ("sleep", "done"),
            ("step", "completed"),
            ("sleep", "sleeping"),
        ]

    project.wait_for(sleeping_after_two_steps)
    proc.kill()
    proc.wait()

    finish_with_worker(project)
    data = project.gather("crash")
    assert data["run"]["status"] == "completed"
    assert data["run"]["output"] == [0, 10, 20]
    assert starts(project) == {0: 1, 1: 1, 2: 1}


def test_ctrl_c_while_waiting_for_a_hook_names_what_finishes_the_run(project: Project) -> None:
    """`wf run --wait` on a run that waits for a hook alone: a worker cannot finish it, the
    payload does; the line said `wf worker` would."""
    proc = project.spawn("run", "tests.cli.flows:approval", "--wait", "--id", "hooked")
    project.wait_for(lambda: project.status("hooked") == "suspended")
    time.sleep(0.2)  # past the suspension, into the wait
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert out == ""
    assert (
        "interrupted: run hooked waits for hook 'approve-me' in the store; "
        "`wf hook resume approve-me --data JSON` delivers it and finishes the run\n"
    ) in err, err
    assert "wf worker" not in err.split("interrupted:")[1]
    assert project.status("hooked") == "suspended"


def test_ctrl_c_leaves_the_run_to_a_worker(project: Project) -> None:
    (project.log / "hold_0").touch()
    proc = project.spawn("run", "tests.cli.flows:chain", "-i", '{"n": 2}', "--id", "intr")
    project.wait_for(lambda: starts(project)[0] == 1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert out == ""
    assert "interrupted: run intr continues durably; `wf worker` will finish it" in err
    assert "Traceback" not in err

    (project.log / "hold_0").unlink()
    finish_with_worker(project)
    assert project.gather("intr")["run"]["output"] == [0, 10]
    counts = starts(project)
    assert counts[0] <= 2
    assert counts[1] == 1


def test_two_workers_never_drive_one_run_at_once(project: Project) -> None:
    from tests.cli import flows
    from wf import Engine
    from wf.cli._store import open_store

    workers = [project.spawn("worker", "--concurrency", "4", "--poll", "0.2") for _ in range(2)]
    try:
        # Both workers must be up before the runs exist, so that they compete for them.
        for worker in workers:
            assert worker.stderr is not None
            assert "worker started" in worker.stderr.readline()

        async def create() -> list[str]:
            store = open_store()
            try:
                engine = Engine(store)
                ids = []
                for k in range(30):
                    run = await engine.start(
                        flows.stamps,
                        (f"r{k:02d}",),
                        {},
                        detach=True,
                        target="tests.cli.flows:stamps",
                    )
                    ids.append(run.id)
                return ids
            finally:
                await store.close()

        ids = asyncio.run(create())

        def all_done() -> bool:
            runs = project.runs()
            return len(runs) == 30 and all(r["status"] == "completed" for r in runs)

        project.wait_for(all_done, timeout=40)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        outputs = [worker.communicate(timeout=30) for worker in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    for _, err in outputs:
        assert "SIGTERM: draining" in err
        assert "Traceback" not in err

    intervals: dict[str, list[tuple[int, float, float]]] = collections.defaultdict(list)
    steps_run: collections.Counter[str] = collections.Counter()
    for line in project.lines("stamps"):
        tag, pid, start, end = line.split()
        intervals[tag.split("/")[0]].append((int(pid), float(start), float(end)))
        steps_run[tag] += 1
    assert set(intervals) == {f"r{k:02d}" for k in range(30)}
    assert all(count == 1 for count in steps_run.values())  # no step ran twice
    assert len(steps_run) == 90
    for key, spans in intervals.items():
        for pid_a, start_a, end_a in spans:
            for pid_b, start_b, end_b in spans:
                if pid_a != pid_b:
                    assert end_a <= start_b or end_b <= start_a, f"run {key} driven by two"
    assert len({pid for spans in intervals.values() for pid, _, _ in spans}) == 2  # both worked
    outputs_by_id = {r["id"]: r["output"] for r in project.runs()}
    assert outputs_by_id[ids[0]] == ["r00/0", "r00/1", "r00/2"]


def test_cancelling_a_run_whose_driver_died_mid_step_does_not_run_that_step_again(
    project: Project,
) -> None:
    (project.log / "hold_1").touch()
    proc = project.spawn("run", "tests.cli.flows:chain", "-i", '{"n": 3}', "--id", "dead")
    project.wait_for(lambda: starts(project)[1] == 1)
    proc.kill()
    proc.wait()
    (project.log / "hold_1").unlink()

    cancel = project.wf("cancel", "dead")
    assert cancel.returncode == 0, cancel.stderr
    assert "run dead: cancelled" in cancel.stderr
    assert starts(project) == {0: 1, 1: 1}  # the interrupted step was not started again
    data = project.gather("dead")
    assert data["run"]["status"] == "cancelled"
    assert data["run"]["cancel_requested"] is True
    kinds = [e["type"] for e in data["events"]]
    after = kinds[kinds.index("cancel_requested") :]
    assert "cancel_delivered" in after and after[-1] == "run_cancelled"
    assert "step_started" not in after and "step_completed" not in after


def test_worker_grace_abandons_steps_still_running_and_says_which(project: Project) -> None:
    (project.log / "hold_1").touch()  # step 1 outlasts the grace
    queued = project.wf("run", "tests.cli.flows:chain", "-i", '{"n": 3}', "--id", "g", "--detach")
    assert queued.returncode == 0, queued.stderr
    worker = project.spawn("worker", "--grace", "0.5")
    project.wait_for(lambda: starts(project)[1] == 1)
    worker.send_signal(signal.SIGTERM)
    _out, err = worker.communicate(timeout=30)  # not held up by the step's thread
    assert worker.returncode == 0, err
    assert "g step 'work' (operation #1) abandoned after the 0.5s grace" in err
    assert [line for line in err.splitlines() if "abandoned" in line] == [
        line for line in err.splitlines() if "g step 'work' (operation #1) abandoned" in line
    ], err  # said once (the engine said it too, in other words)
    assert project.status("g") != "completed"

    (project.log / "hold_1").unlink()
    finish_with_worker(project)
    assert project.gather("g")["run"]["output"] == [0, 10, 20]
    assert starts(project) == {0: 1, 1: 2, 2: 1}  # the abandoned step ran again on resume


def test_a_worker_stops_although_a_step_ignores_its_cancellation(project: Project) -> None:
    """After the grace the step is cancelled; a step that swallows that is left running (and
    the process exits without waiting for it) rather than keep the worker from stopping. The
    drive is waited for 0.5 s once cancelled, not 5 s (``tests.short_cancel_grace``)."""
    (project.log / "deaf").touch()
    queued = project.wf("run", "tests.cli.flows:deaf_flow", "--id", "d", "--detach")
    assert queued.returncode == 0, queued.stderr
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.short_cancel_grace", "worker", "--grace", "0.2"],
        cwd=project.root,
        env=project.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    project.wait_for(lambda: "start deaf" in project.lines("steps"))
    worker.send_signal(signal.SIGTERM)
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "ignored a cancellation" in project.lines("steps")
    assert "run d did not stop when cancelled" in err
    assert project.status("d") != "completed"

    (project.log / "deaf").unlink()
    finish_with_worker(project)
    assert project.gather("d")["run"]["output"] == "heard"


def test_a_step_raising_keyboard_interrupt_fails_its_run_and_ctrl_c_still_drains(
    project: Project,
) -> None:
    """A KeyboardInterrupt out of a step's code is its run's failure: the worker, and the run
    whose step it is running, go on; a real Ctrl-C (SIGINT) still drains the worker."""
    (project.log / "hold_0").touch()  # the good run's step holds until this file goes away
    queued = project.wf(
        "run", "tests.cli.flows:chain", "-i", '{"n": 1}', "--id", "good", "--detach"
    )
    assert queued.returncode == 0, queued.stderr
    worker = project.spawn("worker", "--poll", "0.2")
    project.wait_for(lambda: starts(project)[0] == 1)
    queued = project.wf("run", "tests.cli.flows:interrupting", "--id", "kb", "--detach")
    assert queued.returncode == 0, queued.stderr
    project.wait_for(lambda: project.status("kb") == "failed")
    assert worker.poll() is None  # still serving
    (project.log / "hold_0").unlink()
    project.wait_for(lambda: project.status("good") == "completed")

    worker.send_signal(signal.SIGINT)
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "SIGINT: draining" in err and "Traceback" not in err
    error = project.gather("kb")["run"]["error"]
    assert error["type"] == "wf.FatalError"
    assert "step 'interrupts' raised KeyboardInterrupt" in error["message"]
    assert project.lines("steps").count("start interrupts") == 1


def _blocked_then_signalled(
    proc: subprocess.Popen[str], sig: signal.Signals, times: int
) -> tuple[int, str]:
    """Send ``sig`` to ``proc`` ``times`` times, the first time after the loop is blocked
    and the second once it said so; its exit code and stderr (killed if it does not end)."""
    try:
        proc.send_signal(sig)
        time.sleep(BLOCKED_AFTER + 1.0)  # long enough for it to say the loop is blocked
        if times == 2:
            proc.send_signal(sig)
        _out, err = proc.communicate(timeout=15 if times == 2 else 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_ends_a_worker_whose_event_loop_a_step_blocks(
    project: Project, sig: signal.Signals
) -> None:
    """A step that never awaits keeps the worker's loop from draining: the first signal says
    so and how to leave, a second exits at once (130), and the run resumes later."""
    (project.log / "spin").touch()
    queued = project.wf("run", "tests.cli.flows:spinning", "--id", "spin", "--detach")
    assert queued.returncode == 0, queued.stderr
    worker = project.spawn("worker", "--poll", "0.2")
    project.wait_for(lambda: "start spin" in project.lines("steps"))
    code, err = _blocked_then_signalled(worker, sig, 2)
    assert code == 130, err
    again = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert f"{sig.name}: the event loop is blocked in " in err
    assert "tests/cli/flows.py:" in err and "step 'spin' of run spin" in err
    assert f"{again} again exits at once" in err
    assert f"{sig.name} again: exiting now" in err
    assert "Traceback" not in err

    (project.log / "spin").unlink()
    finish_with_worker(project)
    assert project.gather("spin")["run"]["output"] == "spun"


def test_a_signal_while_a_step_blocks_the_loop_still_drains_once_it_lets_go(
    project: Project,
) -> None:
    """One signal while the loop is blocked is not lost: the worker says the loop is blocked,
    and drains (exit 0) once the step lets the loop go."""
    (project.log / "spin").touch()
    queued = project.wf("run", "tests.cli.flows:spinning", "--id", "spin", "--detach")
    assert queued.returncode == 0, queued.stderr
    worker = project.spawn("worker", "--poll", "0.2")
    project.wait_for(lambda: "start spin" in project.lines("steps"))
    try:
        worker.send_signal(signal.SIGINT)
        time.sleep(BLOCKED_AFTER + 1.0)
        (project.log / "spin").unlink()  # the step ends: the loop turns and drains
        _out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err
    assert "SIGINT: the event loop is blocked in " in err
    assert "SIGINT: draining" in err and "Traceback" not in err
    assert project.gather("spin")["run"]["output"] == "spun"


def test_a_second_ctrl_c_ends_wf_run_whose_workflow_blocks_the_loop(project: Project) -> None:
    (project.log / "spin").touch()
    proc = project.spawn("run", "tests.cli.flows:spinning", "--id", "spin")
    project.wait_for(lambda: "start spin" in project.lines("steps"))
    code, err = _blocked_then_signalled(proc, signal.SIGINT, 2)
    assert code == 130, err
    assert "Ctrl-C again exits at once" in err and "SIGINT again: exiting now" in err
    assert "Traceback" not in err

    (project.log / "spin").unlink()
    finish_with_worker(project)
    assert project.gather("spin")["run"]["output"] == "spun"
