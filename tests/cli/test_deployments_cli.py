"""Deployments on the command line (issue #36): ``wf deployments`` and ``upgrade``'s answers
and bad input, ``wf inspect``'s word on a run no live worker serves, and ``wf run`` and ``wf
wake`` leaving a run pinned to another deployment to its workers."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.cli.conftest import Project

ADDER = "tests.cli.flows:adder"
SLEEPER = "tests.cli.flows:sleeper"


@contextlib.contextmanager
def reaped(waiter: subprocess.Popen[str]) -> Iterator[None]:
    """A spawned ``wf run`` still going when the block ends (an assertion failed) is killed."""
    try:
        yield
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()


def start(project: Project, deployment: str | None, *args: str) -> str:
    env = {} if deployment is None else {"WF_DEPLOYMENT": deployment}
    done = project.wf("run", *args, "--detach", **env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_deployments_lists_runs_by_deployment_and_unpinned_last(project: Project) -> None:
    first = start(project, "v1", ADDER, "-i", "[1, 2]")
    start(project, "v2", ADDER, "-i", "[3, 4]")
    start(project, None, ADDER, "-i", "[5, 6]")
    done = project.wf("deployments", "--json", WF_DEPLOYMENT="v2")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["current"] == "v2" and data["workers_of_any_deployment"] == 0
    listed = [(d["deployment"], d["runs"], d["workers"]) for d in data["deployments"]]
    assert listed == [
        ("v1", {"pending": 1}, 0),
        ("v2", {"pending": 1}, 0),
        (None, {"pending": 1}, 0),
    ]
    text = project.wf("deployments", WF_DEPLOYMENT="v2").stdout
    assert "v2  (this project's)" in text and "(unpinned)" in text
    # A pinned run no live worker serves says what it waits for.
    shown = project.wf("inspect", first)
    assert "waiting for a worker of deployment v1" in shown.stdout + shown.stderr


def test_a_worker_of_v1_drives_v1_and_unpinned_runs_and_says_what_waits(
    project: Project,
) -> None:
    mine = start(project, "v1", ADDER, "-i", "[1, 2]")
    theirs = start(project, "v2", ADDER, "-i", "[3, 4]")
    loose = start(project, None, ADDER, "-i", "[5, 6]")
    done = project.wf("worker", "--until-idle", WF_DEPLOYMENT="v1")
    assert done.returncode == 0, done.stderr
    assert "deployment v1 and unpinned runs" in done.stderr
    assert "1 unfinished run(s) pinned to deployment v2 wait for its workers" in done.stderr
    assert (project.status(mine), project.status(loose)) == ("completed", "completed")
    assert project.status(theirs) == "pending"
    done = project.wf("worker", "--until-idle", "--any-deployment", WF_DEPLOYMENT="v1")
    assert done.returncode == 0 and project.status(theirs) == "completed"


def test_wf_run_and_wake_leave_a_run_of_another_deployment_to_its_workers(
    project: Project,
) -> None:
    run_id = start(project, "v1", ADDER, "-i", "[1, 2]", "--id", "pinned-1")
    waiter = project.spawn("run", ADDER, "-i", "[1, 2]", "--id", run_id, WF_DEPLOYMENT="v2")
    with reaped(waiter):
        assert waiter.stderr is not None
        line = waiter.stderr.readline()
        while "pinned to deployment v1" not in line:
            assert waiter.poll() is None, "wf run exited"
            line = waiter.stderr.readline()
        assert "waiting for a worker of deployment v1" in line
        assert project.status(run_id) == "pending"  # not driven on v2's code
        done = project.wf("worker", "--until-idle", WF_DEPLOYMENT="v1")
        assert done.returncode == 0, done.stderr
        out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert out.strip() == "3" and "driving it on" not in err
    napping = start(project, "v1", SLEEPER, "-i", "3600")
    done = project.wf("wake", napping, "--no-wait", WF_DEPLOYMENT="v2")
    assert done.returncode == 0, done.stderr
    assert project.status(napping) == "pending"  # the wake-up is stored; v1's workers apply it
    done = project.wf("wake", napping)  # no id here: the code at hand drives every run
    assert done.returncode == 0, done.stderr
    assert f"note: run {napping} is pinned to deployment v1; driving it on the code here" in (
        done.stderr
    )
    assert project.status(napping) != "pending"  # driven here


def test_upgrade_without_a_target_and_bad_ids_are_usage_errors(project: Project) -> None:
    done = project.wf("deployments", "upgrade", "v1")
    assert done.returncode == 2 and "give --to ID" in done.stderr
    done = project.wf("deployments", "upgrade", "v1", "--to", "")
    assert done.returncode == 2 and "deployment cannot be empty" in done.stderr
    done = project.wf("deployments", WF_DEPLOYMENT="latest")
    assert done.returncode == 2 and "WF_DEPLOYMENT" in done.stderr


def test_upgrade_with_nothing_to_move_says_so(project: Project) -> None:
    done = project.wf("deployments", "upgrade", "v0", "--to", "v1", "--json", WF_DEPLOYMENT="v1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "from": "v0",
        "to": "v1",
        "dry_run": False,
        "moved": [],
        "busy": [],
        "kept": [],
        "warning": None,
    }


def test_upgrade_to_a_deployment_no_live_worker_serves_warns(project: Project) -> None:
    run = start(project, "v1", ADDER, "-i", "[1, 2]")
    dry = project.wf("deployments", "upgrade", "v1", "--dry-run", WF_DEPLOYMENT="v3")
    assert dry.returncode == 0, dry.stderr
    assert dry.stderr == (
        "warning: no live worker of deployment v3: the 1 run(s) it would move wait until one "
        "starts\n"
    )
    done = project.wf("deployments", "upgrade", "v1", "--json", WF_DEPLOYMENT="v3")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["moved"] == [run]
    assert (
        data["warning"]
        == "no live worker of deployment v3: the 1 moved run(s) wait until one starts"
    )
    assert done.stderr == f"warning: {data['warning']}\n"
    worker = project.spawn("worker", "--poll", "0.2", WF_DEPLOYMENT="v4")
    try:
        assert worker.stderr is not None
        while "worker started" not in worker.stderr.readline():
            assert worker.poll() is None, "the worker exited"
        done = project.wf("deployments", "upgrade", "v3", "--json", WF_DEPLOYMENT="v4")
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warning"] is None and "warning" not in done.stderr


@pytest.mark.parametrize("bad", ["latest", "*", "a\x01b", "", " ", "v1 "])
def test_a_bad_deployment_id_in_the_table_is_one_line_exit_2(project: Project, bad: str) -> None:
    (project.root / "pyproject.toml").write_text(
        "[tool.wf]\ndeployment = " + json.dumps(bad) + "\n"
    )
    done = project.wf("run", ADDER, "-i", "[1, 2]")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "deployment" in done.stderr


def test_an_empty_wf_deployment_is_one_line_exit_2_naming_the_variable(project: Project) -> None:
    (project.root / "pyproject.toml").write_text('[tool.wf]\ndeployment = "tbl"\n')
    for command in (("run", ADDER, "-i", "[1, 2]"), ("worker", "--until-idle")):
        done = project.wf(*command, WF_DEPLOYMENT="")
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "WF_DEPLOYMENT=''" in done.stderr
    assert project.wf("runs", "--json").stdout.strip() == "[]"


def test_upgrade_names_no_deployment_this_project_is_not_unless_forced(project: Project) -> None:
    start(project, "v1", ADDER, "-i", "[1, 2]")
    # From v1's own project the replay runs on v1's code: it proves nothing about v2's.
    done = project.wf("deployments", "upgrade", "v1", "--to", "v2", WF_DEPLOYMENT="v1")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "this project is deployment v1, not v2" in done.stderr
    done = project.wf("deployments", "upgrade", "v1", "--to", "v2")
    assert done.returncode == 2 and (
        "this project has no deployment id, so it is not deployment v2: runs replay" in done.stderr
    )
    assert "pending" in project.wf("runs", "--deployment", "v1").stdout  # nothing moved
    done = project.wf("deployments", "upgrade", "v1", "--to", "v2", "--force", "--json")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["moved"]) == 1


@pytest.mark.parametrize("target", ["latest", "*"])
def test_upgrade_to_a_reserved_name_is_a_usage_error(project: Project, target: str) -> None:
    done = project.wf("deployments", "upgrade", "v1", "--to", target, "--force")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"deployment cannot be '{target}'" in done.stderr


def test_upgrade_to_itself_or_from_an_unknown_deployment_says_so(project: Project) -> None:
    done = project.wf("deployments", "upgrade", "v2", WF_DEPLOYMENT="v2")
    assert done.returncode == 2 and "both deployment v2: nothing to move" in done.stderr
    done = project.wf("deployments", "upgrade", "nosuch", WF_DEPLOYMENT="v2")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "no unfinished run is pinned to deployment nosuch\n"


def test_a_live_worker_is_listed_with_its_deployment_until_it_stops(project: Project) -> None:
    start(project, "v1", ADDER, "-i", "[1, 2]")
    worker = project.spawn("worker", "--poll", "0.2", WF_DEPLOYMENT="v1")
    try:
        assert worker.stderr is not None
        while "worker started" not in worker.stderr.readline():
            assert worker.poll() is None, "the worker exited"
        data = json.loads(project.wf("deployments", "--json").stdout)
        assert [(d["deployment"], d["workers"]) for d in data["deployments"]] == [("v1", 1)]
        served = start(project, "v1", ADDER, "-i", "[3, 4]")
        project.wait_for(lambda: project.status(served) == "completed")
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    data = json.loads(project.wf("deployments", "--json").stdout)
    assert [(d["deployment"], d["workers"]) for d in data["deployments"]] == [("v1", 0)]


def test_check_replay_deployment_checks_only_the_runs_its_workers_drive(
    project: Project,
) -> None:
    start(project, "v1", ADDER, "-i", "[1, 2]")
    mine = start(project, "v2", ADDER, "-i", "[3, 4]")
    loose = start(project, None, ADDER, "-i", "[5, 6]")
    done = project.wf("check", "--replay", "--unfinished", "--deployment", "v2", "--json")
    assert done.returncode == 0, done.stderr
    checked = {r["run_id"] for r in json.loads(done.stdout)["runs"]}
    assert checked == {mine, loose}  # v1's run stays on v1's code: not this deploy's concern
    assert json.loads(done.stdout)["other_deployments"] == {"v1": 1}
    text = project.wf("check", "--replay", "--unfinished", "--deployment", "v2")
    assert text.returncode == 0, text.stderr
    assert "note: 1 run(s) pinned to other deployments not checked (v1: 1)" in text.stderr
    wrong = project.wf("check", "--replay", "--deployment", "latest")
    assert wrong.returncode == 2 and "deployment cannot be 'latest'" in wrong.stderr
    stray = project.wf("check", "--deployment", "v2")
    assert stray.returncode == 2
    assert "only apply to --replay" in stray.stderr


def test_worker_and_info_say_when_wf_deployment_overrides_the_tables_id(
    project: Project,
) -> None:
    (project.root / "pyproject.toml").write_text('[tool.wf]\ndeployment = "v1"\n')
    done = project.wf("worker", "--until-idle", WF_DEPLOYMENT="v2")
    assert done.returncode == 0, done.stderr
    assert "deployment v2 (WF_DEPLOYMENT over [tool.wf] deployment v1) and unpinned" in done.stderr
    info = project.wf("info", WF_DEPLOYMENT="v2")
    assert '"v2"  (from WF_DEPLOYMENT; overrides [tool.wf] deployment "v1")' in info.stdout
    setting = json.loads(project.wf("info", "--json", WF_DEPLOYMENT="v2").stdout)["settings"]
    assert setting["deployment"] == {"value": "v2", "origin": "WF_DEPLOYMENT", "overrides": "v1"}
    same = project.wf("worker", "--until-idle", WF_DEPLOYMENT="v1")
    assert "deployment v1 and unpinned" in same.stderr and "over" not in same.stderr


def test_wf_run_of_a_due_run_of_another_deployment_says_whose_worker_it_waits_for(
    project: Project,
) -> None:
    """The hook's payload is in the run's inbox already: ``wf run`` on another deployment waits
    for the run's deployment's worker, and does not ask for the payload again."""
    done = project.wf(
        "run", "tests.cli.flows:halves", "-i", '"p"', "--id", "due", WF_DEPLOYMENT="v1"
    )
    assert (done.returncode, done.stdout) == (0, "due\n"), done.stderr
    done = project.wf("hook", "resume", "half:p", "--data", '"go"', "--no-wait")
    assert done.returncode == 0, done.stderr
    waiter = project.spawn(
        "run", "tests.cli.flows:halves", "-i", '"p"', "--id", "due", WF_DEPLOYMENT="v2"
    )
    lines: list[str] = []
    try:
        assert waiter.stderr is not None
        while not lines or "waiting here" not in lines[-1]:
            assert waiter.poll() is None, "".join(lines)
            lines.append(waiter.stderr.readline())
    finally:
        waiter.kill()
        waiter.communicate()
    assert lines[-1] == (
        "wf: run due has what it waits for (hook 'half:p') in its inbox: waiting here for a "
        "worker of deployment v1 to drive it. Ctrl-C leaves it safe in the store\n"
    ), lines
    assert "wf hook resume" not in "".join(lines), lines


def test_wf_run_leaving_a_pinned_run_at_its_hook_names_that_deployment_s_worker(
    project: Project,
) -> None:
    """Delivering the hook of a run pinned elsewhere does not finish it here: the line ``wf run``
    leaves with says that a worker of that deployment does."""
    run_id = start(project, "v1", "tests.cli.flows:approval", "--id", "pinned-hook")
    waiter = project.spawn("run", "tests.cli.flows:approval", "--id", run_id, WF_DEPLOYMENT="v2")
    with reaped(waiter):
        done = project.wf("worker", "--until-idle", WF_DEPLOYMENT="v1")
        assert done.returncode == 0, done.stderr
        out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert out.strip().splitlines()[-1] == run_id
    deliver = "`wf hook resume approve-me --data JSON` delivers it"
    assert f"{deliver}, and a worker of deployment v1 then finishes the run" in err
