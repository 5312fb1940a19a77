"""``wf worker``'s and ``wf serve``'s line per drive of a run."""

from __future__ import annotations

import logging

import pytest

from tests.cli.conftest import Project
from wf._events import waiting
from wf.cli._worker import report_drive, report_timer
from wf.store import RunRecord, RunStatus


def test_a_drive_line_shows_a_long_hook_token_shortened_and_a_name_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A generated token (a webhook's is all that authorises its URL) is not for the log.
    secret = "nLL-eKHgq3uZ0x7v1Jm2Yb9dWcTQpA4s"
    record = RunRecord(
        "wrun_1",
        "orders",
        RunStatus.SUSPENDED,
        waiting_for=[waiting("hook", secret, None), waiting("hook", "approval", None)],
    )
    caplog.set_level(logging.INFO)
    report_drive(record, 0.5)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "hook 'nLL-eKHg…'" in text and "hook 'approval'" in text
    assert secret not in text


def test_a_quiet_worker_builds_no_line_for_a_drive_that_ended_well(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--quiet`` (the WARNING level) drops the line of a run that completed or suspended:
    it is not built (its words and fields cost a tenth of a short run's end in a drain). A
    failed run's line is a warning, still said."""
    import wf.admin._words as words

    built: list[float] = []
    duration = words.duration

    def noted(seconds: float) -> str:
        built.append(seconds)
        return duration(seconds)

    monkeypatch.setattr(words, "duration", noted)
    caplog.set_level(logging.WARNING, logger="wf")
    report_drive(RunRecord("wrun_1", "orders", RunStatus.COMPLETED), 0.5)
    report_drive(RunRecord("wrun_2", "orders", RunStatus.SUSPENDED), 0.5)
    assert built == [] and caplog.records == []
    failed = RunRecord("wrun_3", "orders", RunStatus.FAILED, error={"type": "E", "message": "no"})
    report_drive(failed, 0.5)
    assert built and [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "wrun_3 orders failed" in caplog.records[0].getMessage()


def test_the_timer_line_of_until_idle_says_its_moment_in_iso_8601_utc(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker's log line, which a log shipper reads too, says a moment in ISO 8601, UTC
    (docs/cli.md, "Times"), not in this machine's zone."""
    caplog.set_level(logging.INFO)
    report_timer(1_800_000_000.0, "wrun_1")
    report_timer(1_800_000_060.0, None)
    assert [r.getMessage() for r in caplog.records] == [
        "waiting for a timer due at 2027-01-15T08:00:00+00:00 (run wrun_1)",
        "waiting for a timer due at 2027-01-15T08:01:00+00:00",
    ]


def test_until_idle_exits_1_for_a_damaged_run_alone(project: Project) -> None:
    """The one due run's journal is damaged: the claim passes over it and names it. The exit
    said 0 (the run was counted undriven only once a further claim had taken in the damage,
    so the same store with a good run beside it exited 1)."""
    bad = project.cli(
        "run", "tests.cli.flows:adder", "--input", "[1, 1]", "--detach"
    ).stdout.strip()
    (project.store_dir / "runs" / bad / "journal.jsonl").write_text("[]\n")
    result = project.cli("worker", "--until-idle")
    assert result.exit_code == 1, result.output
    assert f"skipped run {bad}" in result.stderr
    assert "could not drive 1 run(s)" in result.stderr and bad in result.stderr


def test_a_run_whose_journal_refuses_to_open_is_skipped_for_now_and_said_so(
    project: Project,
) -> None:
    """``wf worker`` drives the other runs, exits as for a skipped run, and its last lines say
    that the skipped run is tried again (not left alone like a damaged one)."""
    import errno

    from wf.store.local import _fsops

    started = [
        project.cli("run", "tests.cli.flows:adder", "--input", f"[{n}, 1]", "--detach")
        for n in range(3)
    ]
    bad, *good = [result.stdout.strip() for result in started]
    journal = str(project.store_dir / "runs" / bad / "journal.jsonl")
    with _fsops.inject("open", errno.EACCES, match=journal):
        result = project.cli("worker", "--until-idle")
    assert result.exit_code == 1, result.output
    for run_id in good:
        assert f"{run_id} tests.cli.flows:adder completed" in result.stderr
    assert f"skipped run {bad}" in result.stderr and "(tried again later)" in result.stderr
    assert "is tried again every 30 s while a worker runs" in result.stderr
    assert "the worker leaves them alone" not in result.stderr


def test_until_idle_leave_timers_exits_while_a_run_sleeps_and_says_what_it_left(
    project: Project,
) -> None:
    """A cron job draining a deployment (docs/deploying.md) ends although a run sleeps for an
    hour: the sleep stays for a later worker, or for ``wf deployments upgrade``."""
    asleep = project.cli(
        "run", "tests.cli.flows:sleeper", "--input", "3600", "--detach"
    ).stdout.strip()
    due = project.cli("run", "tests.cli.flows:adder", "--input", "[1, 1]", "--detach")
    result = project.cli("worker", "--until-idle", "--leave-timers")
    assert result.exit_code == 0, result.output
    assert f"{due.stdout.strip()} tests.cli.flows:adder completed" in result.stderr
    assert (
        "leaving a timer due at " in result.stderr
        and f"(run {asleep}) for a later worker" in result.stderr
    )
    assert "waiting for a timer" not in result.stderr
    assert project.gather(asleep)["run"]["status"] == "suspended"
    alone = project.cli("worker", "--leave-timers")
    assert alone.exit_code == 2 and "--leave-timers goes with --until-idle" in alone.output
