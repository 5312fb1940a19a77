"""``wf logs`` and ``wf run``'s stdout: step output is captured per attempt and kept off stdout."""

from __future__ import annotations

import json

from tests.cli.conftest import Project


def test_wf_run_prints_only_the_result_on_stdout(project: Project) -> None:
    done = project.wf("run", "tests.cli.log_flows:talkative", "-i", "3", "--id", "t1", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"doubled": 6, "plus": 4}  # `| jq` works
    assert "hello from chatty 3" in done.stderr
    assert "the workflow body prints too" in done.stderr


def test_wf_logs_shows_each_attempts_output(project: Project) -> None:
    assert project.wf("run", "tests.cli.log_flows:talkative", "--id", "t2", "-q").returncode == 0
    shown = project.wf("logs", "t2")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "── chatty · attempt 1 ──",
        "hello from chatty 1",
        "[stderr] a warning on stderr",
        "[WARNING app.chatty] logged 1",
        "── quiet_step · attempt 1 ──",
        "quiet 1",
    ]
    only = project.wf("logs", "t2", "--step", "quiet_step", "--json")
    entries = [json.loads(line) for line in only.stdout.splitlines()]
    assert [(e["step"], e["attempt"], e["stream"], e["text"]) for e in entries] == [
        ("quiet_step", 1, "stdout", "quiet 1")
    ]


def test_wf_logs_of_an_unknown_run_is_a_usage_error(project: Project) -> None:
    shown = project.wf("logs", "wrun_nope")
    assert shown.returncode == 2
    assert "Traceback" not in shown.stderr


def test_what_a_step_printed_before_a_crash_is_kept(project: Project) -> None:
    (project.log / "hold").touch()
    proc = project.spawn("run", "tests.cli.log_flows:crashing", "--id", "c1", "-q")

    def printed() -> bool:
        shown = project.wf("logs", "c1")
        return "before the crash" in shown.stdout

    project.wait_for(printed)
    proc.kill()
    proc.wait()
    (project.log / "hold").unlink()
    worker = project.wf("worker", "--until-idle", "--poll", "0.2", "-q")
    assert worker.returncode == 0, worker.stderr
    assert project.wf("logs", "c1").stdout.splitlines() == [
        "── hangs_after_printing · attempt 1 ──",
        "before the crash",
        "── hangs_after_printing · attempt 1 ──",
        "before the crash",
        "after the crash",
    ]


def test_wf_logs_follow_ends_with_the_run(project: Project) -> None:
    (project.log / "hold").touch()
    run = project.spawn("run", "tests.cli.log_flows:crashing", "--id", "f1", "-q")
    project.wait_for(lambda: "before the crash" in project.wf("logs", "f1").stdout)
    follower = project.spawn("logs", "f1", "--follow")
    (project.log / "hold").unlink()
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert out.splitlines()[-2:] == ["before the crash", "after the crash"]
    assert run.wait(timeout=60) == 0


def test_wf_worker_logs_json_lines_for_log_shippers(project: Project) -> None:
    queued = project.wf("run", "tests.cli.log_flows:talkative", "--id", "j1", "--detach")
    assert queued.returncode == 0, queued.stderr
    worker = project.wf("worker", "--until-idle", "--poll", "0.2", "--log-format", "json")
    assert worker.returncode == 0, worker.stderr
    # The step's own prints pass through to the terminal; the worker's lines are JSON.
    lines = [json.loads(line) for line in worker.stderr.splitlines() if line.startswith("{")]
    done = [line for line in lines if line.get("run_id") == "j1"]
    assert len(done) == 1
    assert done[0]["status"] == "completed" and done[0]["workflow"].endswith("talkative")
    assert done[0]["level"] == "info" and done[0]["logger"] == "wf"
    assert {"ts", "message", "seconds"} <= set(done[0])
    assert lines[0]["message"].startswith("worker started") and lines[0]["pid"] > 0


def test_an_unknown_log_format_is_a_usage_error(project: Project) -> None:
    done = project.wf("worker", "--until-idle", "--log-format", "xml")
    assert done.returncode == 2
    assert "xml" in done.stderr


def test_wf_logs_of_a_step_the_run_has_not_names_the_steps_it_has(project: Project) -> None:
    assert project.wf("run", "tests.cli.log_flows:talkative", "--id", "t3", "-q").returncode == 0
    for follow in ("--no-follow", "--follow"):
        typo = project.wf("logs", "t3", "--step", "chaty", follow)
        assert typo.returncode == 2, typo.stderr
        assert typo.stdout == ""
        assert typo.stderr == (
            "error: run t3 has no step 'chaty' (its steps: 'chatty', 'quiet_step')\n"
        )
    for name in ("", "\x1b"):
        bad = project.wf("logs", "t3", "--step", name)
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr.startswith("error: a step name ") and bad.stderr.count("\n") == 1
