"""``wf worker`` always ends once it stopped, whatever code in its runs left behind: threads a
step started (non-daemon ones, which the interpreter waits for at exit) are named in one line
and left after the ``--grace``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    ("flow", "raised"),
    [("callback_exit", "SystemExit(4)"), ("task_interrupt", "KeyboardInterrupt")],
)
def test_code_in_a_run_raising_systemexit_or_keyboardinterrupt_does_not_end_the_worker(
    project: Project, flow: str, raised: str
) -> None:
    """Raised outside the run's steps (a loop callback, a task the step left to the loop),
    they reached the event loop and ended the worker: rc 4 with nothing said, or 130 and
    "interrupted" as if Ctrl-C. The worker says what and whose, and goes on."""
    queued = project.wf("run", f"tests.cli.exit_flows:{flow}", "--id", "x1", "--detach")
    assert queued.returncode == 0, queued.stderr
    for i in (1, 2):
        beside = project.wf(
            "run", "tests.cli.exit_flows:beside", "-i", str(i), "--id", f"b{i}", "-d"
        )
        assert beside.returncode == 0, beside.stderr
    proc, err = spawn_logged(project, "worker", "--until-idle")
    assert finished(proc, 30) == 0, err.read_text()
    said = [line for line in err.read_text().splitlines() if raised in line]
    assert len(said) == 1, err.read_text()
    assert "run x1" in said[0] and "not a signal" in said[0], said
    assert "interrupted" not in err.read_text()
    assert [project.status(r) for r in ("x1", "b1", "b2")] == ["completed"] * 3


def test_one_that_no_run_owns_ends_the_worker_saying_so_with_1(project: Project) -> None:
    queued = project.wf("run", "tests.cli.exit_flows:anonymous_exit", "--id", "x1", "--detach")
    assert queued.returncode == 0, queued.stderr
    proc, err = spawn_logged(project, "worker", "--until-idle")
    assert finished(proc, 30) == 1, err.read_text()
    assert (
        "SystemExit(5) raised by code on the event loop (not a signal) ended the process; runs "
        "in flight resume from their journals" in err.read_text()
    )
    assert "Traceback" not in err.read_text()
    assert project.status("x1") == "running"  # due: the next worker resumes it


def test_a_worker_ended_by_an_error_does_not_wait_for_such_a_thread(project: Project) -> None:
    """The threads left were waited for only when the loop returned: a worker ended with 1
    (an exit no run owns), or 3 (the store given up), waited for them forever."""
    queued = project.wf("run", "tests.cli.exit_flows:thread_then_exit", "--id", "x1", "-d")
    assert queued.returncode == 0, queued.stderr
    proc, err = spawn_logged(project, "worker", "--until-idle", "--grace", "0.5")
    assert finished(proc, 20) == 1, err.read_text()
    said = [line for line in err.read_text().splitlines() if "'lib-pool'" in line]
    assert len(said) == 1 and "0.5 s" in said[0], err.read_text()
    assert "SystemExit(5) raised by code on the event loop" in err.read_text()
    assert "Traceback" not in err.read_text()


def test_the_code_an_error_maps_to_is_the_one_left_with_its_line_said_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store given up after an outage (a StoreError) is said in its line, then the
    threads are left with its code, 3 (they were not: the error skipped the wait)."""
    from wf import StoreError
    from wf.cli import _stopping

    left: list[int] = []
    monkeypatch.setattr(_stopping, "leave_despite_threads", lambda code, *_: left.append(code))

    def gives_up() -> int:
        raise StoreError("the store stayed unreachable for 300 s")

    assert _stopping.ended_despite_threads(gives_up, 1.0, print) == 3
    assert left == [3]
    assert "error: the store stayed unreachable for 300 s" in capsys.readouterr().err

    def exits() -> int:
        raise SystemExit(1)

    assert _stopping.ended_despite_threads(exits, 1.0, print) == 1
    assert _stopping.ended_despite_threads(lambda: None, 1.0, print) == 0
    assert left == [3, 1, 0]


def test_an_idle_pool_a_step_used_neither_delays_the_exit_nor_is_named(project: Project) -> None:
    """A library's idle ThreadPoolExecutor worker (non-daemon) was counted as a thread still
    running: every stop waited the whole --grace and said so, falsely (the interpreter's exit
    ends such a worker at once)."""
    queued = project.wf("run", "tests.cli.exit_flows:pooled", "--id", "p1", "--detach")
    assert queued.returncode == 0, queued.stderr
    proc, err = spawn_logged(project, "worker", "--until-idle", "--grace", "60")
    assert finished(proc, 20) == 0, err.read_text()
    assert "thread(s)" not in err.read_text(), err.read_text()
    assert project.status("p1") == "completed"


def test_a_pool_left_busy_is_named_and_left_after_the_grace(project: Project) -> None:
    queued = project.wf("run", "tests.cli.exit_flows:busy_pool", "--id", "p1", "--detach")
    assert queued.returncode == 0, queued.stderr
    proc, err = spawn_logged(project, "worker", "--until-idle", "--grace", "0.5")
    assert finished(proc, 20) == 0, err.read_text()
    said = [line for line in err.read_text().splitlines() if "thread(s)" in line]
    assert len(said) == 1 and "'busy-pool_0'" in said[0], err.read_text()


def test_a_library_thread_that_ends_with_the_loop_is_not_named_but_one_left_busy_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``wf dev``'s file watcher (watchfiles) waits in an AnyIO worker thread, told to stop
    as the event loop ends and gone a step later: it was named on every stop as `1 thread(s)
    started by code in runs still run: 'AnyIO worker thread'`. One that code in a run left
    busy (an abandoned blocking call) is still named."""
    import asyncio
    import concurrent.futures.thread
    import threading
    import time

    import anyio
    import anyio.to_thread

    import wf.cli
    from wf.cli import _stopping

    async def watcher_step() -> None:
        with anyio.move_on_after(0.01):  # the loop stops while the thread ends its step
            await anyio.to_thread.run_sync(time.sleep, 0.1, abandon_on_cancel=True)

    asyncio.run(watcher_step())
    monkeypatch.setattr(wf.cli, "owns_interpreter", lambda: True)
    # Ending the idle pools closes concurrent.futures to new work for the whole process (it is
    # exiting, in wf): this test's worker process goes on to run other tests, so it is undone.
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", False)
    said: list[str] = []
    _stopping.leave_despite_threads(0, 5.0, said.append)
    assert said == []

    release = threading.Event()

    async def abandoned_call() -> None:
        with anyio.move_on_after(0.01):
            await anyio.to_thread.run_sync(release.wait, 10, abandon_on_cancel=True)

    asyncio.run(abandoned_call())
    try:
        _stopping._end_idle_pools()
        names = [t.name for t in _stopping.lingering_threads()]
        assert names == ["AnyIO worker thread"]
    finally:
        release.set()
