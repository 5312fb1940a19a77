"""The queue on the command line (issue #15): ``wf run``'s queue options, their bad input (one
line, exit 2, nothing created), ``wf retry``, ``wf watch`` and ``wf inspect``'s word on what
holds a pending run."""

from __future__ import annotations

import json
import time

import pytest

from tests.cli.conftest import Project

ADDER = "tests.cli.flows:adder"
FAILING = "tests.cli.flows:failing"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        pytest.param(["--priority", "-1"], "priority", id="negative-priority"),
        pytest.param(["--priority", "2097152"], "priority", id="huge-priority"),
        pytest.param(["--max-attempts", "0"], "max_attempts", id="no-attempts"),
        pytest.param(["--at", "2030-01-01T09:00:00"], "time zone", id="at-without-zone"),
        pytest.param(["--at", "9999-12-31T23:59:59-14:00"], "9999", id="at-past-9999"),
        pytest.param(["--delay", "99999999999d"], "9999", id="delay-past-9999"),
        pytest.param(["--delay", "inf"], "delay", id="delay-inf"),
        pytest.param(["--delay", "1e308d"], "is not a duration", id="delay-exponent"),
        pytest.param(["--delay", "1" * 400 + "d"], "finite", id="delay-past-float"),
        pytest.param(["--group", "\ud800"], "not valid UTF-8", id="group-surrogate"),
        pytest.param(["--group", "a\x00b"], "control character", id="group-nul"),
        pytest.param(["--group", ""], "empty", id="group-empty"),
        pytest.param(["--group", "g" * 513], "at most 512", id="group-over-long"),
        pytest.param(["--id", "order-1\n"], "run id", id="id-newline"),
        pytest.param(["--id", "\ud800"], "not valid UTF-8", id="id-surrogate"),
        pytest.param(["--delay", "soon"], "delay", id="bad-delay"),
        pytest.param(["--delay", "5s", "--at", "2030-01-01T09:00:00+00:00"], "not both", id="both"),
    ],
)
def test_bad_queue_options_are_one_line_exit_2_and_create_nothing(
    project: Project, extra: list[str], fragment: str
) -> None:
    result = project.cli("run", ADDER, "-i", "[1]", "--detach", *extra)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], result.stderr
    assert project.runs() == []


def test_queue_options_reach_the_run_and_a_delayed_run_says_when_it_is_due(
    project: Project,
) -> None:
    result = project.cli(
        "run", ADDER, "-i", "[1]", "--detach", "--priority", "7", "--group", "g",
        "--delay", "90s", "--max-attempts", "3",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip().split()[-1]
    [listed] = project.runs()
    assert listed["id"] == run_id and listed["status"] == "pending"
    detail = json.loads(project.cli("inspect", run_id, "--json").stdout)
    record = detail["run"]
    assert (record["priority"], record["group"], record["max_attempts"]) == (7, "g", 3)
    assert record["wake_at"] is not None  # due in 90 s
    held = detail["queue"]["held"]
    assert "delayed" in held["reason"]
    assert "delayed" in project.cli("inspect", run_id).stdout


def test_delay_reads_durations_as_retentions_do(project: Project) -> None:
    # One grammar for every duration: ``--delay 2w`` as ``retention = "2w"`` (docs/cli.md).
    result = project.cli("run", ADDER, "-i", "[1]", "--delay", "2w")
    assert result.exit_code == 0, result.stderr
    [listed] = project.runs()
    record = json.loads(project.cli("inspect", listed["id"], "--json").stdout)["run"]
    assert record["wake_at"] - record["created_at"] == pytest.approx(14 * 86400, abs=5)


@pytest.mark.parametrize(
    "when",
    [
        pytest.param(["--delay", "90s"], id="delay"),
        pytest.param(["--at", "2099-01-01T09:00:00+00:00"], id="at"),
    ],
)
def test_a_delayed_run_is_only_queued_and_the_command_returns_with_the_detach_hint(
    project: Project, when: list[str]
) -> None:
    result = project.cli("run", ADDER, "-i", "[1]", *when)
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip()
    assert "queued in" in result.stderr and f"wf inspect {run_id}" in result.stderr
    [listed] = project.runs()
    assert listed["id"] == run_id and listed["status"] == "pending"
    as_json = project.cli("run", ADDER, "-i", "[2]", "--json", *when)
    assert as_json.exit_code == 0, as_json.stderr
    assert json.loads(as_json.stdout)["status"] == "pending"


def test_a_run_behind_its_group_is_explained_in_words_naming_the_run_ahead(
    project: Project,
) -> None:
    first = project.cli("run", ADDER, "-i", "[1]", "--detach", "--group", "ada", "--delay", "1h")
    # Another workflow's run of the same group: a queue of its own, so another lane.
    other = project.cli("run", "tests.cli.flows:defiant", "--group", "ada", "--delay", "1h")
    second = project.cli("run", ADDER, "-i", "[2]", "--detach", "--group", "ada")
    assert first.exit_code == other.exit_code == second.exit_code == 0
    first_id, other_id, second_id = (r.stdout.strip().split()[-1] for r in (first, other, second))
    held = json.loads(project.cli("inspect", second_id, "--json").stdout)["queue"]["held"]
    assert "group 'ada'" in held["reason"] and held["ahead"] == 1
    assert first_id in held["reason"] and other_id not in held["reason"]
    shown = project.cli("inspect", second_id).stdout
    assert "group 'ada'" in shown and first_id in shown
    other_held = json.loads(project.cli("inspect", other_id, "--json").stdout)["queue"]["held"]
    assert "delayed" in other_held["reason"]  # only its delay holds it, never ADDER's lane


def test_unique_refuses_an_existing_id_with_exit_2(project: Project) -> None:
    assert project.cli("run", ADDER, "-i", "[1]", "--id", "once", "--detach").exit_code == 0
    again = project.cli("run", ADDER, "-i", "[1]", "--id", "once", "--detach")
    assert again.exit_code == 0  # the same id, workflow and input: the existing run
    other = project.cli("run", ADDER, "-i", "[2]", "--id", "once", "--detach")
    unique = project.cli("run", ADDER, "-i", "[1]", "--id", "once", "--detach", "--unique")
    for refused in (other, unique):
        assert refused.exit_code == 2, refused.output
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert [r["id"] for r in project.runs()] == ["once"]


def test_retry_queues_one_more_attempt_and_watch_shows_the_end(project: Project) -> None:
    failed = project.cli("run", FAILING, "--json")
    assert failed.exit_code == 1
    run_id = json.loads(failed.stdout)["run_id"]
    retried = project.cli("retry", run_id, "--detach")
    assert retried.exit_code == 0, retried.stderr
    assert project.status(run_id) == "pending"
    worker = project.cli("worker", "--until-idle", "--quiet")
    assert worker.exit_code == 0, worker.stderr
    detail = json.loads(project.cli("inspect", run_id, "--json").stdout)
    assert detail["run"]["status"] == "failed" and detail["run"]["attempt"] == 2
    # Each attempt, and the error that ended it, in --json and in words.
    attempts = detail["queue"]["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert all("boom" in a["error"]["message"] for a in attempts), attempts
    text = project.cli("inspect", run_id).stdout
    assert "attempt 2 of 2" in text and "attempt 1 failed" in text, text
    watched = project.cli("watch", run_id, "--json")
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [e["kind"] for e in events] == ["failed"]  # a finished run: its terminal event
    again = project.cli("retry", "nope")
    assert again.exit_code != 0


def test_a_worker_with_queue_serves_only_those_queues(project: Project) -> None:
    mail = project.cli("run", "tests.cli.flows:mailer", "-i", '["hi"]', "--detach")
    other = project.cli("run", ADDER, "-i", "[1]", "--detach")
    mail_id, other_id = (r.stdout.strip().split()[-1] for r in (mail, other))
    worker = project.cli("worker", "--until-idle", "--quiet", "--queue", "mail")
    assert worker.exit_code == 0, worker.stderr
    assert project.status(mail_id) == "completed"
    assert project.status(other_id) == "pending"


def test_a_worker_with_queue_until_idle_waits_only_for_its_own_queues_timers(
    project: Project,
) -> None:
    mail = project.cli("run", "tests.cli.flows:mailer", "-i", '["hi"]', "--detach")
    later = project.cli("run", ADDER, "-i", "[1]", "--delay", "82s")  # another queue's timer
    mail_id, later_id = (r.stdout.strip().split()[-1] for r in (mail, later))
    started = time.monotonic()
    worker = project.wf("worker", "--until-idle", "--quiet", "--queue", "mail", timeout=30)
    assert worker.returncode == 0, worker.stderr
    assert time.monotonic() - started < 30
    assert project.status(mail_id) == "completed"
    assert project.status(later_id) == "pending"


def test_a_run_held_by_a_cap_is_explained_in_words(project: Project) -> None:
    (project.log / "hold_1").touch()  # the first run holds the cap's one place until removed
    first = project.cli("run", "tests.cli.flows:capped", "-i", "[1]", "--detach")
    second = project.cli("run", "tests.cli.flows:capped", "-i", "[2]", "--detach")
    assert first.exit_code == second.exit_code == 0
    first_id, second_id = (r.stdout.strip().split()[-1] for r in (first, second))
    worker = project.spawn("worker", "--quiet")
    try:
        project.wait_for(lambda: any(line.startswith("start 1") for line in project.lines("steps")))
        assert project.status(first_id) == "running"
        detail = json.loads(project.cli("inspect", second_id, "--json").stdout)
        assert detail["run"]["status"] == "pending"
        held = detail["queue"]["held"]
        assert "cap of workflow" in held["reason"] and "1 at once" in held["reason"], held
        text = project.cli("inspect", second_id).stdout
        assert "cap of workflow" in text, text
        (project.log / "hold_1").unlink()
        project.wait_for(lambda: project.status(second_id) == "completed")
        assert project.status(first_id) == "completed"
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


def test_retry_keeps_stdout_for_the_result_as_run_does(project: Project) -> None:
    failed = project.wf("run", "tests.cli.flows:loud", "--id", "loud", "-q")
    assert failed.returncode == 1, failed.stderr
    assert failed.stdout == ""  # a failed run's error is on stderr
    (project.log / "allowed").touch()
    retried = project.wf("retry", "loud")
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout) == "done"  # the result alone: `wf retry ... | jq` works
    assert "said by the step" in retried.stderr
