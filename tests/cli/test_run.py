"""``wf run``: results, failures, and every way the command line can be wrong (no run created)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import REPO, Project
from wf import decode


def assert_one_line_error(result: object, fragment: str) -> None:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert fragment in lines[0], stderr
    assert "Traceback" not in stderr


BAD_USAGE = [
    pytest.param(["tests.cli.flows:adder", "--input", "{a: 1"], "not valid JSON", id="bad-json"),
    pytest.param(
        ["tests.cli.flows:adder", "--input", "@missing.json"], "cannot read", id="no-file"
    ),
    pytest.param(["no_such_module:adder"], "no module named 'no_such_module'", id="no-module"),
    pytest.param(["missing/file.py:adder"], "no such file", id="no-path"),
    pytest.param(["tests.cli.flows:nope"], "has no attribute 'nope'", id="no-attr"),
    pytest.param(["tests.cli.flows"], "name the workflow after a colon", id="no-colon"),
    pytest.param(
        ["tests/cli/flows.py:adder:extra"],
        "one colon too many: 'tests/cli/flows.py' is the module, 'adder:extra' is no attribute",
        id="two-colons",
    ),
    pytest.param(["tests.cli.flows:adder:"], "one colon too many", id="trailing-colon"),
    pytest.param(["no_such_module"], "expected 'module:attribute'", id="no-colon-no-module"),
    pytest.param(
        ["tests.cli.flows:adder", "--input", "world"],
        """a string needs JSON quotes: --input '"world"' (wf help input)""",
        id="bare-string",
    ),
    pytest.param(["tests.cli.flows:add"], "not a workflow", id="a-step"),
    pytest.param(["tests.cli.flows:log_dir"], "not a workflow", id="a-function"),
    pytest.param(["tests.cli.flows:adder", "--input", '{"x": 1}'], "'x'", id="unknown-param"),
    pytest.param(["tests.cli.flows:adder"], "'a'", id="missing-param"),
    pytest.param(["tests.cli.flows:adder", "--input", '{"a": "x"}'], "'a'", id="wrong-type"),
    pytest.param(["tests.cli.flows:adder", "--input", "[1, 2, 3]"], "", id="too-many"),
    pytest.param(["tests.cli.flows:adder", "--input", "1", "--id", "../x"], "run id", id="bad-id"),
    pytest.param(["tests.cli.flows:adder", "-i", "1", "--id", ""], "cannot be empty", id="no-id"),
    pytest.param(
        ["tests.cli.flows:adder", "-i", "[1, 2]", "--detach", "--wait"],
        "--detach only queues it",
        id="detach-and-wait",
    ),
    pytest.param(
        ["tests.cli.flows:adder", "-i", "[1, 2]", "--delay", "5s", "--wait"],
        "--delay only queues it",
        id="delay-and-wait",
    ),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_USAGE)
def test_bad_usage_exits_2_with_one_line_and_creates_no_run(
    project: Project, args: list[str], fragment: str
) -> None:
    result = project.cli("run", *args)
    assert result.exit_code == 2
    assert_one_line_error(result, fragment)
    assert result.stdout == ""
    assert project.runs() == []


def test_a_completed_run_prints_its_result_as_json(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:adder", "--input", '{"a": 2, "b": 3}')
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == 5
    [run] = project.runs()
    assert run["status"] == "completed"
    assert run["target"] == "tests.cli.flows:adder"


@pytest.mark.parametrize(
    ("given", "expected"),
    [("[4, 5]", 9), ('{"a": 4}', 5), ("4", 5)],
    ids=["array", "object", "single"],
)
def test_input_binds_by_position_name_or_single_value(
    project: Project, given: str, expected: int
) -> None:
    result = project.cli("run", "tests.cli.flows:adder", "--input", given, "-q")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == expected


def test_input_from_a_file_and_from_stdin(project: Project) -> None:
    Path("input.json").write_text('{"a": 10}')
    from_file = project.cli("run", "tests.cli.flows:adder", "--input", "@input.json", "-q")
    assert json.loads(from_file.stdout) == 11
    from_stdin = project.cli("run", "tests.cli.flows:adder", "--input", "-", "-q", input="[1, 1]")
    assert json.loads(from_stdin.stdout) == 2


def test_json_flag_prints_id_status_and_output(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--json", "--id", "my-run")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"run_id": "my-run", "status": "completed", "output": 2}


def test_progress_goes_to_stderr_as_plain_lines_when_not_a_terminal(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:adder", "-i", "1")
    assert "step 'add' completed" in result.stderr
    quiet = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--quiet")
    assert quiet.stderr == ""


def test_a_failed_run_exits_1_with_the_error_and_a_hint(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:failing", "-i", '"kaput"', "-q")
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    [run] = project.runs()
    assert lines == [
        f"error: run {run['id']} failed: wf.FatalError: kaput",
        f"hint: wf inspect {run['id']}",
    ]
    assert run["status"] == "failed"


def test_a_failed_runs_error_line_shows_its_line_breaks_as_wf_runs_does(project: Project) -> None:
    """``a\\n b`` recorded: the ``error:`` line says ``a \\n b``, as ``wf runs``, ``wf inspect``
    and the app show it, not ``a b`` (which hides that the message had two lines)."""
    result = project.cli("run", "tests.cli.flows:failing", "-i", '"a \\n b\\u001b[2J"', "-q")
    assert result.exit_code == 1
    [run] = project.runs()
    line = f"error: run {run['id']} failed: wf.FatalError: a \\n b\\x1b[2J"
    assert result.stderr.splitlines()[0] == line


def test_an_output_that_does_not_fit_the_annotation_fails_the_run(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:wrong_output", "-q")
    assert result.exit_code == 1
    [run] = project.runs()
    message = (
        "wf.OutputValidationError: output of workflow 'tests.cli.flows:wrong_output': Input "
        "should be a valid integer, unable to parse string as an integer (got 'nope')"
    )
    assert result.stderr.strip().splitlines() == [
        f"error: run {run['id']} failed: {message}",
        f"hint: wf inspect {run['id']}",
    ]
    shown = project.cli("inspect", run["id"])
    assert f"failed: {message}" in shown.stdout
    data = json.loads(project.cli("inspect", run["id"], "--json").stdout)
    assert data["why"] == f"failed: {message}"
    [error] = data["errors"]
    assert (error["name"], error["type"]) == ("run", "wf.OutputValidationError")


def test_a_failed_run_with_json(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:failing", "--json", "-q")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == "failed"
    assert data["output"] is None
    assert data["error"]["message"] == "boom"


def test_starting_an_existing_id_returns_that_run_without_running_it_again(
    project: Project,
) -> None:
    first = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", "once", "-q")
    again = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", "once", "-q")
    assert json.loads(first.stdout) == json.loads(again.stdout) == 2
    assert len(project.runs()) == 1
    other = project.cli("run", "tests.cli.flows:failing", "--id", "once", "-q")
    assert other.exit_code == 2
    assert_one_line_error(other, "exists already")
    changed = project.cli("run", "tests.cli.flows:adder", "-i", "5", "--id", "once", "-q")
    assert changed.exit_code == 2
    assert_one_line_error(changed, "exists already with another input")
    assert len(project.runs()) == 1


def test_starting_an_id_that_exists_says_so_and_shows_its_past_once(project: Project) -> None:
    """A second ``wf run --id X`` attaches to run X: it says the run exists (when it started,
    its status), sums up what is done in one line instead of replaying each past event as if
    it happened now, then shows only what happens from here, and ends with the result."""
    first = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", "once")
    assert first.exit_code == 0 and "step 'add' started" in first.stderr
    again = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", "once")
    assert (again.exit_code, json.loads(again.stdout)) == (0, 2)
    lines = again.stderr.splitlines()
    assert lines[0].startswith("wf: run once exists already: started "), again.stderr
    assert "completed" in lines[0], again.stderr
    assert lines[1:] == ["wf: so far: step 'add' completed"], again.stderr
    # Half done: the step before the hook is history, the rest is shown as it happens.
    waiting = project.cli("run", "tests.cli.flows:halves", "-i", '"k"', "--id", "half")
    assert (waiting.exit_code, waiting.stdout) == (0, "half\n"), waiting.stderr
    sent = project.cli("hook", "resume", "half:k", "--data", '"go"', "--no-wait")
    assert sent.exit_code == 0, sent.stderr
    attached = project.cli("run", "tests.cli.flows:halves", "-i", '"k"', "--id", "half")
    assert attached.exit_code == 0, attached.stderr
    assert json.loads(attached.stdout) == "began k, finished go"
    lines = attached.stderr.splitlines()
    assert lines[0].startswith("wf: run half exists already: started "), attached.stderr
    assert lines[0].endswith(", suspended now; following it from here"), attached.stderr
    # The whole output: the past as it was when this command found the run (the payload is
    # taken in by the drive here, so it is news), and no advice to deliver what is delivered.
    assert lines[1:-1] == [
        "wf: so far: step 'begin' completed, hook 'half:k' waiting",
        "wf: hook 'half:k' received a payload",
        "wf: run resumed",
        "wf: step 'finish' started",
    ], attached.stderr
    assert lines[-1].startswith("wf: step 'finish' completed in "), attached.stderr
    assert project.runs()[0]["status"] == "completed"


def test_an_id_that_exists_is_driven_to_its_end_while_this_process_takes_its_payload(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drive here acknowledges the run's inbox before it saves the run as running: a read
    in between sees the run suspended with an empty inbox. ``wf run`` must not leave then (it
    would cut its own drive): the window is widened here, as a slow store would."""
    import asyncio

    from wf.engine import _driver

    waiting = project.cli("run", "tests.cli.flows:halves", "-i", '"k"', "--id", "slow")
    assert (waiting.exit_code, waiting.stdout) == (0, "slow\n"), waiting.stderr
    sent = project.cli("hook", "resume", "half:k", "--data", '"go"', "--no-wait")
    assert sent.exit_code == 0, sent.stderr
    mark = _driver._mark_drive

    async def slow_mark(*args: object, **kwargs: object) -> None:
        await asyncio.sleep(0.6)
        await mark(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_driver, "_mark_drive", slow_mark)
    attached = project.cli("run", "tests.cli.flows:halves", "-i", '"k"', "--id", "slow")
    assert attached.exit_code == 0, attached.stderr
    assert json.loads(attached.stdout) == "began k, finished go", attached.stderr
    assert "waits for hook" not in attached.stderr, attached.stderr
    assert project.runs()[0]["status"] == "completed"


def test_detach_of_an_id_that_exists_says_it_is_left_as_it_is(project: Project) -> None:
    """``--detach`` follows nothing: the line on a run that exists does not say it does, and an
    unfinished run that exists is not said to be queued."""
    waiting = project.cli("run", "tests.cli.flows:halves", "-i", '"k"', "--id", "left")
    assert waiting.exit_code == 0, waiting.stderr
    again = project.cli("run", "tests.cli.flows:halves", "-i", '"k"', "--id", "left", "-d")
    assert (again.exit_code, again.stdout) == (0, "left\n"), again.stderr
    lines = again.stderr.splitlines()
    assert len(lines) == 1, again.stderr
    assert lines[0].startswith("wf: run left exists already: started "), again.stderr
    assert lines[0].endswith(
        ", suspended now; --detach leaves it as it is (`wf inspect left` follows it)"
    ), again.stderr


def test_starting_the_id_of_a_deleted_run_says_so_and_runs_nothing(project: Project) -> None:
    """Once gc deleted the run, its id is still taken (while its tombstone is kept): one line
    naming the deletion, exit 2, no run; with --detach too (it used to start the run again)."""
    first = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", "once", "-q")
    assert json.loads(first.stdout) == 2
    assert project.cli("gc", "--older-than", "0s").exit_code == 0
    for extra in ([], ["--detach"]):
        again = project.cli("run", "tests.cli.flows:adder", "-i", "1", "--id", "once", *extra)
        assert again.exit_code == 2, extra
        assert_one_line_error(again, "run 'once' was deleted by wf gc at ")
        assert project.runs() == []


def test_detach_prints_the_id_and_a_worker_finishes_the_run(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:adder", "-i", "[20, 22]", "--detach")
    assert result.exit_code == 0
    run_id = result.stdout.strip()
    assert run_id.startswith("wrun_")
    assert project.runs()[0]["status"] == "pending"

    worker = project.cli("worker", "--until-idle")
    assert worker.exit_code == 0, worker.stderr
    assert f"{run_id} tests.cli.flows:adder completed" in worker.stderr
    data = project.gather(run_id)
    assert data["run"]["status"] == "completed"
    assert data["run"]["output"] == 42


def test_output_is_tagged_json(project: Project) -> None:
    result = project.cli("run", "tests.cli.flows:sleeper", "-i", "0", "-q")
    assert json.loads(result.stdout) == "awake"


def test_the_examples_run_as_documented(project: Project) -> None:
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "wf", "run", target, *extra],
            cwd=REPO,
            env=project.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, target, extra in [
            ("hello", "examples/hello.py:hello", ["--input", '{"name": "world"}']),
            ("flaky", "examples/flaky.py:fetch_quote", []),
            ("sleepy", "examples/sleepy.py:nap", ["--input", '{"seconds": 0.2}']),
        ]
    }
    out = {name: proc.communicate(timeout=60) for name, proc in procs.items()}
    assert {name: p.returncode for name, p in procs.items()} == dict.fromkeys(procs, 0), out
    assert json.loads(out["hello"][0]) == {"greeting": "Hello, world!", "loud": "HELLO, WORLD!"}
    assert json.loads(out["flaky"][0]) == {"WF": 42.0}
    assert "retrying" in out["flaky"][1]
    assert [s.split(" at ")[0] for s in json.loads(out["sleepy"][0])] == ["fell asleep", "woke up"]


def test_lone_surrogates_in_results_inputs_and_errors_round_trip(project: Project) -> None:
    done = project.cli("run", "tests.cli.flows:odd_names", "--json", "-q")
    assert done.exit_code == 0, done.stderr
    output = decode(json.loads(done.stdout)["output"])
    assert output == [os.fsdecode(b"report-\xff.csv"), b"report-\xff.csv".hex()]

    echoed = project.cli("run", "tests.cli.flows:echo", "-i", '"a\\udcff"', "--json", "-q")
    assert echoed.exit_code == 0, echoed.stderr
    assert decode(json.loads(echoed.stdout)["output"]) == "a\udcff"

    failed = project.cli("run", "tests.cli.flows:odd_failure", "--json", "-q")
    assert failed.exit_code == 1  # failed like any run: recorded, not wedged as running
    assert "missing-\\udcff.csv" in json.loads(failed.stdout)["error"]["message"]
    assert {r["status"] for r in project.runs()} == {"completed", "failed"}


def test_a_run_waiting_for_a_hook_returns_and_names_the_command_that_finishes_it(
    project: Project,
) -> None:
    """Only the outside delivers a hook: `wf run` leaves the run waiting safely in the store,
    prints its id, and says which command finishes it; `--json` reports it as suspended."""
    left = project.wf("run", "tests.cli.flows:approval", timeout=30)
    assert left.returncode == 0, left.stderr
    run_id = left.stdout.strip()
    assert run_id.startswith("wrun_")
    assert project.status(run_id) == "suspended"
    assert "waits for hook 'approve-me', which only the outside can deliver" in left.stderr
    assert "safe in the store" in left.stderr
    assert "`wf hook resume approve-me --data JSON`" in left.stderr
    assert "`wf run --wait`" in left.stderr

    finished = project.wf("hook", "resume", "approve-me", "--data", '"yes"')
    assert finished.returncode == 0, finished.stderr
    assert project.gather(run_id)["run"]["output"] == "yes"

    as_json = project.cli("run", "tests.cli.flows:approval", "--id", "j1", "--json")
    assert as_json.exit_code == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {"run_id": "j1", "status": "suspended", "output": None}


def test_wait_keeps_waiting_for_the_hook_and_says_how_to_deliver_it(project: Project) -> None:
    proc = project.spawn("run", "tests.cli.flows:approval", "--id", "w1", "--wait")
    assert proc.stderr is not None
    said = ""
    while "waiting here" not in said:  # bounded by the test timeout
        said += proc.stderr.readline()
    assert "`wf hook resume approve-me --data JSON` delivers it" in said
    assert "Ctrl-C leaves it safe in the store" in said
    assert proc.poll() is None  # still waiting
    assert project.wf("hook", "resume", "approve-me", "--data", '"ok"').returncode == 0
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out) == "ok"


def test_sleepy_example_runs_as_its_instructions_say(project: Project) -> None:
    """examples/sleepy.py's own instructions: the run suspends in its hour-long sleep and says
    so, Ctrl-C leaves it safe, `wf runs` lists it, and `wf wake` finishes it at once."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "wf", "run", "examples/sleepy.py:nap", "-i", '{"seconds": 3600}'],
        cwd=REPO,
        env=project.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    said = ""
    while "waiting here" not in said:  # bounded by the test timeout
        said += proc.stderr.readline()
    assert "sleeps until" in said and "Ctrl-C leaves it safe in the store" in said
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    [run] = project.runs()
    assert run["status"] == "suspended"
    assert f"`wf wake {run['id']}` ends a sleep now" in said

    woken = project.wf("wake", run["id"], timeout=30)
    assert woken.returncode == 0, woken.stderr
    assert f"run {run['id']}: completed" in woken.stderr
    output = project.gather(run["id"])["run"]["output"]
    assert [line.split(" at ")[0] for line in output] == ["fell asleep", "woke up"]


def test_a_full_disk_under_a_foreground_run_says_the_run_resumes(project: Project) -> None:
    """ENOSPC while ``wf run`` drives its run: exit 3 with the store's line, which also says
    the run is not lost (as a closed output says), so a script does not start it again."""
    import errno

    from wf.store.local import _fsops

    runs = str(project.store_dir / "runs")
    with _fsops.inject("write", errno.ENOSPC, match=runs, after=1):
        result = project.cli("run", "tests.cli.flows:adder", "--input", "[1, 2]")
    assert result.exit_code == 3, result.output
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "[ENOSPC]" in line and "stays running and resumes from its journal" in line, line


def test_the_queued_hint_shows_a_store_path_with_a_newline_on_one_line(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = project.root / "a\nb"
    monkeypatch.setenv("WF_DIR", str(odd))
    result = project.cli("run", "tests.cli.flows:adder", "--input", "[1, 2]", "--detach")
    assert result.exit_code == 0, result.output
    [said] = [x for x in result.stderr.splitlines() if "queued in" in x]
    assert f"queued in {project.root}/a\\nb:" in said, result.stderr


@pytest.mark.timeout(120)
def test_a_foreground_run_rides_out_a_store_that_fails_for_a_while(project: Project) -> None:
    """The store failing under ``wf run``'s drive (a PostgreSQL fast restart: a write cut, the
    reads after it refused for a moment): said once, waited out, the run driven again from its
    journal and completed here (it exited 3 and left the run ``running`` for a worker)."""
    result = project.wf(
        "run",
        "tests.cli.outage_flows:steps",
        "--input",
        "10",
        WF_TEST_CUTS="2",
        WF_TEST_DOWN_READS="3",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == 13
    said = [line for line in result.stderr.splitlines() if line.startswith("wf: the store")]
    assert len(said) == 4, result.stderr
    assert "failed under run" in said[0] and "answers again" in said[1], said
    assert "Traceback" not in result.stderr
    [run] = project.runs()
    assert run["status"] == "completed"


@pytest.mark.timeout(120)
def test_a_foreground_run_cut_again_and_again_exits_3_and_leaves_its_run(
    project: Project,
) -> None:
    result = project.wf("run", "tests.cli.outage_flows:steps", "--input", "10", WF_TEST_CUTS="99")
    assert result.returncode == 3, result.stderr
    assert "stays running" in result.stderr
    assert "Traceback" not in result.stderr
