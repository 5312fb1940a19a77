"""``wf dev`` end to end: a subprocess on a temporary project, edited while it serves.

Every wait is bounded (``conftest.WAIT``) and polls for an output line or a stored record;
nothing sleeps for a fixed time.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time

import pytest

from tests.dev.conftest import DevProject, output

GREET = """
    import wf

    @wf.step
    def hello(name: str) -> str:
        return f"hello {name}"

    @wf.workflow
    async def greet(name: str) -> str:
        return await hello(name)
"""


def completed(project: DevProject, run_id: str) -> object:
    """Wait for the run to complete (as stored) and return its output."""
    from wf import decode

    project.wait_for(lambda: project.record(run_id)["status"] == "completed", f"{run_id} done")
    return decode(project.record(run_id)["output"])


def test_new_code_serves_new_runs(project: DevProject) -> None:
    project.write("flows.py", GREET)
    dev = project.dev("flows.py", "--run", "flows:greet", "--input", '"a"')
    _, first = dev.wait("run-completed", workflow="flows:greet")
    assert output(first) == "hello a"

    mark = dev.count()
    project.edit("flows.py", "hello {name}", "howdy {name}")
    at, reloaded = dev.wait("reloaded", after=mark, generation="2")
    assert reloaded["files"] == "flows.py"
    assert reloaded["modules"] == "flows"
    assert int(reloaded["latency_ms"]) >= 0
    # --run starts a run after the reload, on the new code ...
    _, second = dev.wait("run-completed", after=at)
    assert output(second) == "howdy a"
    # ... and so are runs started by any other process.
    assert completed(project, project.enqueue("flows:greet", "b")) == "howdy b"
    assert dev.stop() == 0
    dev.wait("stopped")


def test_a_run_sleeping_across_the_edit_completes_on_the_new_code(project: DevProject) -> None:
    project.write(
        "flows.py",
        """
        import wf

        @wf.step
        def first() -> str:
            return "first"

        @wf.step
        def second() -> str:
            return "old"

        @wf.workflow
        async def napper() -> str:
            a = await first()
            await wf.sleep(2)
            return a + "/" + await second()
        """,
    )
    dev = project.dev("flows.py", WF_SUSPEND_AFTER="0.1")
    run_id = project.enqueue("flows:napper")
    dev.wait("run-suspended", run=run_id)

    mark = dev.count()
    project.edit("flows.py", 'return "old"', 'return "new"')
    _, reloaded = dev.wait("reloaded", after=mark)
    assert int(reloaded["replayed"]) >= 1  # the sleeping run was replay-checked, and is fine
    assert not [e for e in dev.events()[mark:] if e[0] == "diverged"]
    _, done = dev.wait("run-completed", run=run_id)
    assert output(done) == "first/new"
    assert dev.stop() == 0


def test_a_step_in_flight_completes_before_the_reload(project: DevProject) -> None:
    log = project.root / "steps.log"
    project.write(
        "flows.py",
        """
        import os
        import time
        import wf

        @wf.step
        def slow(log: str) -> str:
            with open(log, "a") as f:
                f.write("start\\n")
            # Held until the test has seen the reload wait for it (at most 30 s), not for a
            # fixed time a loaded machine could outlast before the reload noticed the edit.
            deadline = time.monotonic() + 30
            while not os.path.exists(log + ".release") and time.monotonic() < deadline:
                time.sleep(0.01)
            with open(log, "a") as f:
                f.write("end\\n")
            return "slow"

        @wf.step
        def tag() -> str:
            return "one"

        @wf.workflow
        async def busy(log: str) -> str:
            s = await slow(log)
            return s + "-" + await tag()
        """,
    )
    dev = project.dev("flows.py")
    run_id = project.enqueue("flows:busy", str(log))
    project.wait_for(lambda: log.exists() and "start" in log.read_text(), "the step to start")

    mark = dev.count()
    project.edit("flows.py", 'return "one"', 'return "two"')
    # Not a silent wait: the console says which step the reload waits for, and for how long.
    _, waiting = dev.wait("waiting", after=mark)
    assert waiting["steps"] == f"step 'slow' of {run_id}"
    assert waiting["grace"] == "30.0"
    (project.root / "steps.log.release").touch()
    _, drained = dev.wait("drained", after=mark)
    # The drain waited for the step: it had finished when the worker stopped.
    assert log.read_text().splitlines() == ["start", "end"]
    assert run_id in drained["suspended"].split(",")
    assert "interrupted" not in drained
    dev.wait("reloaded", after=mark)
    _, done = dev.wait("run-completed", run=run_id)
    assert output(done) == "slow-two"  # the recorded step result, then the new step
    assert log.read_text().splitlines() == ["start", "end"]  # the step ran once
    assert dev.stop() == 0


def test_broken_code_keeps_the_old_code_serving(project: DevProject) -> None:
    project.write("flows.py", GREET)
    dev = project.dev("flows.py")

    # A syntax error: shown with its location, the reload refused.
    mark = dev.count()
    project.edit("flows.py", "def hello(name: str) -> str:", "def hello(name: str) -> str")
    _, error = dev.wait("syntax-error", after=mark)
    assert error["at"].startswith("flows.py:4:")
    _, kept = dev.wait("kept", after=mark)
    assert kept["generation"] == "1"
    assert completed(project, project.enqueue("flows:greet", "a")) == "hello a"

    # A check finding: shown with its rule and hint, the reload refused.
    mark = dev.count()
    project.write(
        "flows.py",
        GREET.replace("import wf", "import time\n    import wf")
        .replace(
            "        return await hello(name)",
            "        stamp = time.time()\n        return await hello(name) + str(stamp)",
        )
        .replace("hello {name}", "howdy {name}"),
    )
    _, finding = dev.wait("finding", after=mark, code="WF101")
    assert finding["new"] == "yes"
    assert finding["at"].startswith("flows.py:")
    assert finding["hint"]
    dev.wait("kept", after=mark, generation="1")
    assert completed(project, project.enqueue("flows:greet", "b")) == "hello b"

    # Code that passes the check but fails to import: rolled back, the old code serves.
    mark = dev.count()
    project.write("flows.py", GREET + "\n    raise RuntimeError('boom at import')\n")
    _, failed = dev.wait("import-failed", after=mark)
    assert "RuntimeError: boom at import" in failed["error"]
    assert failed["error"].startswith("flows.py:")
    dev.wait("kept", after=mark, generation="1")
    assert completed(project, project.enqueue("flows:greet", "c")) == "hello c"

    # Fixed: the new code serves.
    mark = dev.count()
    project.write("flows.py", GREET.replace("hello {name}", "howdy {name}"))
    dev.wait("reloaded", after=mark, generation="2")
    assert completed(project, project.enqueue("flows:greet", "d")) == "howdy d"
    assert dev.stop() == 0


def test_a_file_that_cannot_be_checked_beside_the_code_stops_nothing(project: DevProject) -> None:
    project.write("flows.py", GREET)
    (project.root / "loop.py").symlink_to("loop.py")
    project.write("deep.py", "x = " + "not " * 50_000 + "1\n")  # the parser: MemoryError
    # Was: wf dev ended at its first check (RuntimeError, MemoryError), exit 1.
    dev = project.dev("flows.py")
    _, unreadable = dev.wait("check-error", at="loop.py:1:1")
    assert unreadable["message"].startswith("cannot read file:")
    _, deep = dev.wait("syntax-error", at="deep.py:1:1")
    assert deep["message"].startswith("cannot parse: nested too deeply")

    # A loop made while it serves is seen among the changes and reloads nothing; the next
    # edit reloads (was: kept reason="reload failed: RuntimeError...").
    mark = dev.count()
    (project.root / "again.py").symlink_to("again.py")
    dev.wait("change", after=mark, files="again.py")
    project.edit("flows.py", "hello {name}", "howdy {name}")
    dev.wait("reloaded", after=mark, generation="2")
    assert not [kind for kind, _ in dev.events()[mark:] if kind == "kept"]
    assert completed(project, project.enqueue("flows:greet", "a")) == "howdy a"
    assert dev.stop() == 0


def test_long_chains_python_runs_reload_and_one_too_deep_to_analyse_is_a_note(
    project: DevProject,
) -> None:
    project.write("flows.py", GREET)
    dev = project.dev("flows.py")
    dev.wait("checked", initial="yes")
    # Was: kept, reason="flows.py:1:1: cannot analyze: nested too deeply" (valid Python).
    arms = "".join(f"    elif x == {i}:\n        return {i}\n" for i in range(1, 250))
    chain = "y = 'a'" + ".strip()" * 1000 + "\n"
    source = f"{textwrap.dedent(GREET)}\n\ndef pick(x):\n    if x == 0:\n        return 0\n{arms}"
    mark = dev.count()
    project.write("flows.py", f"{source}\n\n{chain}")
    _, checked = dev.wait("checked", after=mark)
    assert checked["errors"] == "0"
    _, note = dev.wait("check-note", after=mark)
    written = (project.root / "flows.py").read_text().splitlines()
    assert note["at"] == f"flows.py:{written.index(chain.strip()) + 1}:1"
    assert note["message"].startswith("not analysed: nested too deeply")
    dev.wait("reloaded", after=mark, generation="2")
    assert not [kind for kind, _ in dev.events()[mark:] if kind == "kept"]
    # Shown once, like a known finding: the next reload does not repeat it.
    mark = dev.count()
    project.edit("flows.py", "hello {name}", "howdy {name}")
    dev.wait("reloaded", after=mark, generation="3")
    assert not [kind for kind, _ in dev.events()[mark:] if kind == "check-note"]
    assert dev.stop() == 0


def test_a_module_the_new_code_imports_is_checked_by_that_reload_and_later_ones(
    project: DevProject,
) -> None:
    project.write("flows.py", GREET)
    dev = project.dev("flows.py")
    dev.wait("checked", initial="yes")
    # A byte that is not UTF-8 in a comment: Python imports it. Was: this reload went
    # through, then every later one was kept with "helper.py:1:1: cannot decode file".
    (project.root / "helper.py").write_bytes(b"import wf\n# caf\xe9\nX = 1\n")
    mark = dev.count()
    project.edit("flows.py", "import wf", "import helper\nimport wf")
    dev.wait("reloaded", after=mark, generation="2")
    mark = dev.count()
    project.edit("flows.py", "hello {name}", "howdy {name}")
    dev.wait("reloaded", after=mark, generation="3")

    # A module the new code brings in is checked before it serves (was: not checked then,
    # and its finding, new at the next reload, blocked an unrelated edit).
    # Its import-time code (a thread, an atexit hook, a patch) must not run for a refused
    # reload: it is found by its `import` line and checked before the new code is imported.
    ran = project.root / "clock_ran"
    project.write(
        "clock.py",
        "import pathlib\nimport time\n\npathlib.Path(__file__).with_name('clock_ran').touch()\n\n"
        "\ndef stamp() -> float:\n    return time.time()\n",
    )
    mark = dev.count()
    flows = (project.root / "flows.py").read_text()
    flows = flows.replace("import helper", "import clock\nimport helper")
    flows = flows.replace("return await", "clock.stamp()\n    return await")
    project.write("flows.py", flows)
    _, kept = dev.wait("kept", after=mark, generation="3")
    assert kept["reason"].startswith("clock.py:8:12: WF101 ")
    assert not [kind for kind, _ in dev.events()[mark:] if kind == "reloaded"]
    assert not ran.exists()
    # One check, so each finding is shown once (was: a second `checked` after the import).
    assert [kind for kind, _ in dev.events()[mark:]].count("checked") == 1
    # Fixing that module (which nothing serving imports yet) reloads (was: not counted as
    # affecting anything, so the fix never served).
    mark = dev.count()
    project.write("clock.py", "def stamp() -> float:\n    return 0.0\n")
    dev.wait("reloaded", after=mark, generation="4")

    # A runner module gone is said, whatever else the check found (was: only the check's).
    mark = dev.count()
    (project.root / "helper.py").write_text("X = (\n")
    _, kept = dev.wait("kept", after=mark, generation="4")
    assert kept["reason"].startswith("helper.py:1:")
    mark = dev.count()
    (project.root / "flows.py").rename(project.root / "flows_renamed.py")
    _, kept = dev.wait("kept", after=mark, generation="4")
    assert kept["reason"] == "runner module flows is gone"
    assert dev.stop() == 0


def test_code_raising_keyboard_interrupt_at_import_is_an_import_error(
    project: DevProject,
) -> None:
    project.write("flows.py", "import helper\n" + textwrap.dedent(GREET))
    project.write("helper.py", "raise KeyboardInterrupt\n")
    # Was: wf dev stopped (exit 130) as if Ctrl-C had been pressed, at start or on a reload.
    dev = project.dev("flows.py")
    _, failed = dev.wait("import-failed")
    assert failed["error"] == "helper.py:1: KeyboardInterrupt"

    mark = dev.count()
    project.write("helper.py", "K = 1\n")
    dev.wait("reloaded", after=mark, generation="2")
    mark = dev.count()
    project.write("helper.py", "raise KeyboardInterrupt\n")
    _, failed = dev.wait("import-failed", after=mark)
    assert failed["error"] == "helper.py:1: KeyboardInterrupt"
    dev.wait("kept", after=mark, generation="2")
    assert completed(project, project.enqueue("flows:greet", "k")) == "hello k"
    assert dev.stop(signal.SIGINT) == 0  # a real Ctrl-C still stops it
    dev.wait("stopped")


def test_a_divergent_edit_is_reported_for_the_run(project: DevProject) -> None:
    project.write(
        "flows.py",
        """
        import wf

        @wf.step
        def one() -> int:
            return 1

        @wf.step
        def uno() -> int:
            return 1

        @wf.step
        def two() -> int:
            return 2

        @wf.workflow
        async def patient() -> int:
            a = await one()
            await wf.sleep(120)
            return a + await two()
        """,
    )
    dev = project.dev("flows.py", WF_SUSPEND_AFTER="0.1")
    run_id = project.enqueue("flows:patient")
    dev.wait("run-suspended", run=run_id)

    mark = dev.count()
    project.edit("flows.py", "a = await one()", "a = await uno()")
    _, diverged = dev.wait("diverged", after=mark, run=run_id)
    assert diverged["workflow"] == "flows:patient"
    assert diverged["index"] == "0"
    assert diverged["recorded"] == "step 'one'"
    assert diverged["current"] == "step 'uno'"
    assert diverged["location"] == "flows.py:17"
    assert diverged["inspect"] == f"wf inspect {run_id}"
    assert diverged["held"] == "yes"
    dev.wait("reloaded", after=mark)

    # Due at once now, but held: resumed here it would fail with NondeterminismError.
    project.wake(run_id)
    time.sleep(1.0)  # the post wakes the worker through file events at once: time to act
    assert project.record(run_id)["status"] == "suspended"
    assert not [e for e in dev.events()[mark:] if e[0] in ("run-failed", "run-error")]

    # The edit reverted: the run replays again, is released and finishes.
    mark = dev.count()
    project.edit("flows.py", "a = await uno()", "a = await one()")
    dev.wait("reloaded", after=mark)
    assert completed(project, run_id) == 3
    assert dev.stop() == 0


def test_polling_and_unrelated_files(project: DevProject) -> None:
    project.write("flows.py", GREET)
    dev = project.dev("--poll", "flows.py")
    _, started = dev.wait("starting")
    assert started["mode"] == "polling"

    # A file the serving code is not made of: seen, nothing reloaded.
    mark = dev.count()
    project.write("notes.py", "x = 1\n")
    _, change = dev.wait("change", after=mark, files="notes.py")
    assert "affected" not in change

    mark = dev.count()
    project.edit("flows.py", "hello {name}", "howdy {name}")
    dev.wait("reloaded", after=mark, generation="2")
    assert not [e for e in dev.events() if e[0] == "reloaded" and e[1]["files"] == "notes.py"]
    assert completed(project, project.enqueue("flows:greet", "p")) == "howdy p"
    assert dev.stop(signal.SIGINT) == 0  # Ctrl-C drains and ends cleanly too
    dev.wait("stopped")


# A step that runs until the test lets it go (a file appears), never for a fixed time; the
# edited version returns at once.
WAITING_STEP = """
    import asyncio
    import os
    import wf

    @wf.step
    async def slow(log: str) -> str:
        with open(log, "a") as f:
            f.write("start\\n")
        for _ in range(2000):  # bounded: 100 s at most
            if os.path.exists(log + ".go"):
                break
            await asyncio.sleep(0.05)
        return "old"

    @wf.workflow
    async def busy(log: str) -> str:
        return await slow(log)
"""


# The same step, deaf to cancellation until the test lets it go.
DEAF_STEP = WAITING_STEP.replace(
    "            await asyncio.sleep(0.05)\n",
    "            try:\n"
    "                await asyncio.sleep(0.05)\n"
    "            except asyncio.CancelledError:\n"
    "                pass\n",
)
assert DEAF_STEP != WAITING_STEP


def test_a_reload_goes_ahead_although_a_step_ignores_its_cancellation(
    project: DevProject,
) -> None:
    """After the grace and the cancellation's own 5 s, the run is reported interrupted and
    the reload happens; the step is left running (its result unrecorded)."""
    log = project.root / "steps.log"
    project.write("flows.py", DEAF_STEP)
    dev = project.dev("flows.py", "--grace", "0.2")
    run_id = project.enqueue("flows:busy", str(log))
    project.wait_for(lambda: log.exists() and "start" in log.read_text(), "the step to start")

    mark = dev.count()
    project.write("flows.py", DEAF_STEP.replace('return "old"', 'return "new"'))
    _, drained = dev.wait("drained", after=mark)
    assert drained.get("interrupted") == run_id, dev.dump()
    dev.wait("reloaded", after=mark, generation="2")
    (project.root / "steps.log.go").touch()
    assert dev.stop(signal.SIGINT) == 0
    dev.wait("stopped")


def _restart_a_step_in_flight(project: DevProject, how: str) -> None:
    log = project.root / "steps.log"
    project.write("flows.py", WAITING_STEP)
    if how == "key":
        import pty

        master, slave = pty.openpty()
        dev = project.dev("flows.py", stdin=slave)
        os.close(slave)
    else:
        dev = project.dev("flows.py")
    run_id = project.enqueue("flows:busy", str(log))
    project.wait_for(lambda: log.exists() and "start" in log.read_text(), "the step to start")

    mark = dev.count()
    quick = WAITING_STEP.replace("range(2000)", "range(0)").replace('return "old"', 'return "new"')
    project.write("flows.py", quick)
    # The reload says what it waits for, for how long so far, and how to go ahead now.
    _, waiting = dev.wait("waiting", after=mark)
    assert waiting["steps"] == f"step 'slow' of {run_id}"
    assert int(waiting["running_ms"]) >= 1000
    assert int(waiting["waited_ms"]) >= 900
    if how == "key":
        assert waiting["restart"] == "press r"
        os.write(master, b"r")
    else:
        assert waiting["restart"] == f"kill -USR1 {dev.proc.pid}"
        dev.proc.send_signal(signal.SIGUSR1)
    _, restarting = dev.wait("restarting", after=mark)
    assert restarting["steps"] == f"step 'slow' of {run_id}"
    _, drained = dev.wait("drained", after=mark)
    assert drained.get("interrupted") == run_id, dev.dump()  # abandoned, not waited for
    dev.wait("reloaded", after=mark, generation="2")
    # The step ran again, on the new code, which returns at once.
    _, done = dev.wait("run-completed", run=run_id)
    assert output(done) == "new"
    assert log.read_text().splitlines() == ["start", "start"]
    if how == "key":
        os.close(master)
    assert dev.stop() == 0


def test_a_signal_restarts_the_step_a_reload_waits_for(project: DevProject) -> None:
    _restart_a_step_in_flight(project, "signal")


def test_a_key_press_restarts_the_step_a_reload_waits_for(project: DevProject) -> None:
    _restart_a_step_in_flight(project, "key")


def test_code_that_no_longer_imports_is_refused_before_any_drain(project: DevProject) -> None:
    log = project.root / "steps.log"
    # A known finding (WF101: the workflow reads the clock), shown once at start.
    project.write(
        "flows.py",
        WAITING_STEP.replace("import wf", "import time\n    import wf").replace(
            "        return await slow(log)",
            "        started = time.time()\n        return await slow(log) + str(started > 0)",
        ),
    )
    dev = project.dev("flows.py")
    assert [f["code"] for kind, f in dev.events() if kind == "finding"] == ["WF101"]
    run_id = project.enqueue("flows:busy", str(log))
    project.wait_for(lambda: log.exists() and "start" in log.read_text(), "the step to start")

    source = (project.root / "flows.py").read_text()
    for broken, error in [
        (source + "\nundefined_name + 1\n", "NameError: name 'undefined_name' is not defined"),
        ("import no_such_module_at_all\n" + source, "ModuleNotFoundError: No module named"),
    ]:
        mark = dev.count()
        (project.root / "flows.py").write_text(broken)
        _, failed = dev.wait("import-failed", after=mark)
        assert error in failed["error"] and failed["error"].startswith("flows.py:")
        assert "\n" not in failed["error"]
        dev.wait("kept", after=mark, generation="1")
        later = dev.events()[mark:]
        # Refused with the step still running: nothing was drained, nothing stopped ...
        assert not [kind for kind, _ in later if kind in ("waiting", "drained", "reloaded")]
        # ... and the known finding was not shown again.
        assert not [f for kind, f in later if kind == "finding"]
    assert project.record(run_id)["status"] == "running"

    # The step ends on the code that serves (generation 1); the fixed code then reloads.
    (project.root / "steps.log.go").write_text("")
    assert completed(project, run_id) == "oldTrue"
    mark = dev.count()
    (project.root / "flows.py").write_text(source.replace('return "old"', 'return "new"'))
    dev.wait("reloaded", after=mark, generation="2")
    assert dev.stop() == 0


# A sync step (in a thread, which nothing can stop) that runs until the test lets it go.
BLOCKING_SYNC_STEP = """
    import os
    import time
    import wf

    @wf.step
    def slow(log: str) -> str:
        with open(log, "a") as f:
            f.write("start\\n")
        for _ in range(2000):  # bounded: 100 s at most
            if os.path.exists(log + ".go"):
                break
            time.sleep(0.05)
        return "old"

    @wf.workflow
    async def busy(log: str) -> str:
        return await slow(log)
"""


def test_ctrl_c_while_a_step_runs_says_stopping_offers_to_cut_it_short_and_exits(
    project: DevProject,
) -> None:
    log = project.root / "steps.log"
    project.write("flows.py", BLOCKING_SYNC_STEP)
    dev = project.dev("flows.py")
    run_id = project.enqueue("flows:busy", str(log))
    project.wait_for(lambda: log.exists() and "start" in log.read_text(), "the step to start")

    mark = dev.count()
    dev.proc.send_signal(signal.SIGINT)
    _, stopping = dev.wait("stopping", after=mark)
    cut = f"kill -USR1 {dev.proc.pid} or Ctrl-C again"
    assert stopping["reason"] == f"Ctrl-C: running steps finish first; {cut} cuts them short"
    # While it waits it says so as a stop, not as a reload, and offers the same way out.
    _, waiting = dev.wait("waiting", after=mark)
    assert waiting["stopping"] == "yes"
    assert waiting["steps"] == f"step 'slow' of {run_id}"
    dev.proc.send_signal(signal.SIGUSR1)
    _, restarting = dev.wait("restarting", after=mark)
    assert restarting["stopping"] == "yes"
    _, drained = dev.wait("drained", after=mark)
    assert drained["stopping"] == "yes" and drained["interrupted"] == run_id
    dev.wait("stopped", after=mark)
    # It exits when it says it stopped, although the sync step's thread still runs.
    assert dev.proc.wait(timeout=10) == 0
    assert not (project.root / "steps.log.go").exists()
    assert project.record(run_id)["status"] != "completed"
    assert not [kind for kind, _ in dev.events()[mark:] if kind == "reloaded"]


HANGS = {
    "sleep": ("import time\ntime.sleep(1000)\n", 2),
    "spin": ("while True:\n    pass\n", 1),
}
"""Module bodies whose import never returns, and the line it hangs on."""


@pytest.mark.parametrize("body", sorted(HANGS))
def test_an_import_that_never_returns_is_named_and_wf_dev_recovers_once_the_file_is_fixed(
    project: DevProject, body: str
) -> None:
    """The reload's import is interrupted after WF_DEV_IMPORT_WAIT, naming the line; the old
    code keeps serving; the next change reloads as ever (nothing of the import runs on)."""
    project.write("flows.py", GREET.replace("import wf", "import helper\n    import wf"))
    project.write("helper.py", "K = 1\n")
    dev = project.dev("flows.py", WF_DEV_IMPORT_WAIT="1")
    mark = dev.count()
    source, line = HANGS[body]
    project.write("helper.py", source)
    _, failed = dev.wait("import-failed", after=mark)
    said = f"helper.py:{line}: the import has not returned after 1 s"
    assert failed["error"].startswith(said), dev.dump()
    _, kept = dev.wait("kept", after=mark)
    assert kept == {"generation": "1", "reason": "the new code's import did not return"}
    assert completed(project, project.enqueue("flows:greet", "a")) == "hello a"  # still served

    mark = dev.count()
    project.write("helper.py", "K = 2\n")
    dev.wait("reloaded", after=mark, generation="2")
    assert completed(project, project.enqueue("flows:greet", "b")) == "hello b"
    assert dev.stop() == 0
    assert "Traceback" not in "\n".join(dev.errors), dev.dump()


def test_a_workflow_declared_after_a_slow_part_of_an_import_given_up_never_serves(
    project: DevProject,
) -> None:
    """The import is interrupted, not left running: the workflow its module would declare
    once the slow part is over is never registered, and the old one serves on."""
    project.write("flows.py", GREET)
    dev = project.dev("flows.py", WF_DEV_IMPORT_WAIT="0.5")
    mark = dev.count()
    late = textwrap.dedent(GREET).replace("hello {", "late {")
    project.write("flows.py", "import time\ntime.sleep(2)\n" + late)
    _, failed = dev.wait("import-failed", after=mark)
    assert failed["error"].startswith("flows.py:2: the import has not returned"), failed
    dev.wait("kept", after=mark, generation="1")
    time.sleep(2.0)  # past the slow part, had the import run on
    assert completed(project, project.enqueue("flows:greet", "a")) == "hello a"
    assert dev.stop() == 0


def test_module_level_objects_of_the_loop_thread_serve_the_steps(project: DevProject) -> None:
    """The import runs on the loop's thread, as in ``wf worker``: an SQLite connection made at
    module level serves an async step, at start and after a reload."""
    flows = """
        import sqlite3
        import wf

        DB = sqlite3.connect(":memory:")

        @wf.step
        async def hello(name: str) -> str:
            return str(DB.execute("select ? || ?", ("WORD ", name)).fetchone()[0])

        @wf.workflow
        async def greet(name: str) -> str:
            return await hello(name)
    """
    project.write("flows.py", flows.replace("WORD", "hello"))
    dev = project.dev("flows.py")
    assert completed(project, project.enqueue("flows:greet", "a")) == "hello a"
    mark = dev.count()
    project.write("flows.py", flows.replace("WORD", "howdy"))
    dev.wait("reloaded", after=mark, generation="2")
    assert completed(project, project.enqueue("flows:greet", "b")) == "howdy b"
    assert dev.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_one_signal_stops_wf_dev_while_a_reload_hangs_importing(
    project: DevProject, sig: signal.Signals
) -> None:
    """The import is waited for no longer than a stop signal: one signal interrupts it and
    stops wf dev cleanly (exit 0), however long the import would still take."""
    project.write("flows.py", GREET.replace("import wf", "import helper\n    import wf"))
    project.write("helper.py", "K = 1\n")
    dev = project.dev("flows.py", WF_DEV_IMPORT_WAIT="600")
    mark = dev.count()
    project.write("helper.py", HANGS["sleep"][0])
    dev.wait("checked", after=mark)
    time.sleep(1.0)  # the import starts at once after the check, and hangs
    dev.proc.send_signal(sig)
    assert dev.proc.wait(timeout=15) == 0, dev.dump()
    dev.stop()
    kinds = [kind for kind, _ in dev.events()[mark:]]
    assert "import-failed" in kinds and kinds[-1] == "stopped", dev.dump()
    said = "\n".join(dev.errors)
    assert "again: exiting now" not in said and "Traceback" not in said, dev.dump()


def test_an_import_that_never_returns_at_start_is_named_and_fixed_by_an_edit(
    project: DevProject,
) -> None:
    project.write("flows.py", GREET.replace("import wf", "import helper\n    import wf"))
    project.write("helper.py", HANGS["sleep"][0])
    dev = project.dev("flows.py", WF_DEV_IMPORT_WAIT="1")
    _, failed = dev.wait("import-failed")
    assert failed["error"].startswith("helper.py:2: the import has not returned")
    mark = dev.count()
    project.write("helper.py", "K = 2\n")
    dev.wait("reloaded", after=mark, generation="2")
    assert completed(project, project.enqueue("flows:greet", "c")) == "hello c"
    assert dev.stop() == 0


@pytest.mark.parametrize("wait", ["soon", "0", "-1", "nan", "inf"])
def test_an_import_wait_that_is_no_number_of_seconds_is_bad_input(
    project: DevProject, wait: str
) -> None:
    import subprocess
    import sys

    project.write("flows.py", GREET)
    done = subprocess.run(
        [sys.executable, "-m", "wf", "dev", "flows.py"],
        cwd=project.root,
        env={**project.env, "WF_DEV_IMPORT_WAIT": wait},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stderr == (
        f"error: WF_DEV_IMPORT_WAIT must be a number of seconds above 0, not {wait!r}\n"
    )
    assert not project.store_dir.exists()


def test_with_no_modules_the_run_target_is_tried_again_once_its_file_exists(
    project: DevProject,
) -> None:
    project.write("pyproject.toml", "[tool.wf]\nmodules = []\n")
    dev = project.dev("--run", "flows:greet", "--input", '"a"')
    _, loaded = dev.wait("loaded")
    assert "no modules configured" in loaded["hint"]
    assert "[tool.wf] modules" in loaded["hint"]
    _, failed = dev.wait("run-requested", target="flows:greet")
    assert "cannot import module 'flows'" in failed["error"]
    dev.wait("checked", initial="yes")

    mark = dev.count()
    project.write("flows.py", GREET)
    _, started = dev.wait("run-requested", after=mark, target="flows:greet")
    assert "error" not in started
    _, done = dev.wait("run-completed", after=mark, workflow="flows:greet")
    assert output(done) == "hello a"
    assert dev.stop() == 0


def test_a_changed_file_that_does_not_serve_is_checked(project: DevProject) -> None:
    project.write("flows.py", GREET)
    dev = project.dev("flows.py")
    dev.wait("checked", initial="yes")

    mark = dev.count()
    project.write("broken.py", "import wf\n@wf.workflow\nasync def broken(:\n")
    dev.wait("change", after=mark, files="broken.py")
    _, checked = dev.wait("checked", after=mark)
    assert checked["errors"] == "1"
    _, error = dev.wait("syntax-error", after=mark)
    assert error["at"].startswith("broken.py:3:")

    mark = dev.count()
    project.write(
        "other.py",
        """
        import time
        import wf

        @wf.workflow
        async def clock() -> float:
            return time.time()
        """,
    )
    _, finding = dev.wait("finding", after=mark, code="WF101")
    assert finding["at"].startswith("other.py:")
    assert finding["new"] == "yes"
    assert not [e for e in dev.events()[mark:] if e[0] == "reloaded"]
    assert dev.stop() == 0


@pytest.mark.parametrize("grace", ["nan", "inf", "-5"])
def test_a_configured_grace_that_is_no_number_of_seconds_is_bad_input(
    project: DevProject, grace: str
) -> None:
    import subprocess
    import sys

    project.write("flows.py", GREET)
    done = subprocess.run(
        [sys.executable, "-m", "wf", "dev", "flows.py"],
        cwd=project.root,
        env={**project.env, "WF_DEV_GRACE": grace},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith("error: WF_DEV_GRACE="), done.stderr
    assert "dev.grace must be a number >= 0" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_code_in_a_run_raising_systemexit_into_the_loop_does_not_end_wf_dev(
    project: DevProject,
) -> None:
    # As for `wf worker` and `wf serve`: it ended wf dev with the code's exit status.
    project.write(
        "flows.py",
        GREET
        + """
    import asyncio, sys

    @wf.step
    async def exits_in_a_callback() -> str:
        asyncio.get_running_loop().call_soon(sys.exit, 4)
        await asyncio.sleep(0.2)
        return "after"

    @wf.workflow
    async def callback_exit() -> str:
        return await exits_in_a_callback()
""",
    )
    dev = project.dev("flows.py")
    assert completed(project, project.enqueue("flows:callback_exit")) == "after"
    assert completed(project, project.enqueue("flows:greet", "k")) == "hello k"
    assert dev.proc.poll() is None
    assert dev.stop() == 0
    assert "SystemExit(4)" in dev.dump() and "not a signal" in dev.dump()
