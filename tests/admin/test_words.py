"""Words every front end shares (``wf.admin._words``): one place says them, so the CLI's runs
list and the web UI's say the same."""

from __future__ import annotations

import time

import pytest

from wf.admin._words import run_info, timestamp
from wf.store import RunRecord, RunStatus

BOOM = {"type": "ValueError", "message": "boom"}


def record(status: RunStatus, **fields: object) -> RunRecord:
    return RunRecord(id="wrun_x", workflow="app:flow", status=status, **fields)  # type: ignore[arg-type]


def test_the_info_of_a_run_in_a_runs_list() -> None:
    due = time.time() + 86_400
    retry = [{"kind": "retry", "target": "charge", "until": None}]
    hook = [{"kind": "hook", "target": "k1", "until": None}]
    assert run_info(record(RunStatus.PENDING, wake_at=due)) == f"due {timestamp(due)}"
    assert run_info(record(RunStatus.PENDING)) == ""
    assert run_info(record(RunStatus.SUSPENDED, waiting_for=hook)) == "hook 'k1'"
    assert (
        run_info(record(RunStatus.SUSPENDED, attempt=2, max_attempts=3, waiting_for=retry))
        == "attempt 2/3, retry of step 'charge'"
    )
    assert run_info(record(RunStatus.PENDING, attempt=2, max_attempts=3)) == "attempt 2/3"
    assert run_info(record(RunStatus.FAILED, error=BOOM)) == "ValueError: boom"
    assert (
        run_info(record(RunStatus.FAILED, attempt=3, max_attempts=3, error=BOOM))
        == "after 3 attempts: ValueError: boom"
    )
    assert run_info(record(RunStatus.COMPLETED, attempt=2, max_attempts=3)) == ""


def test_a_long_wait_list_is_bounded_in_one_line_words() -> None:
    from wf.admin._words import describe_event, waiting_text

    hooks = [{"kind": "hook", "target": f"k{i}", "until": None} for i in range(300)]
    short = "hook 'k0'; hook 'k1'; hook 'k2'; and 297 more"
    assert run_info(record(RunStatus.SUSPENDED, waiting_for=hooks)) == short
    assert describe_event({"type": "run_suspended", "waiting_for": hooks}) == (
        f"run suspended: {short}"
    )
    assert waiting_text(hooks[:3]) == "hook 'k0'; hook 'k1'; hook 'k2'"
    assert waiting_text(hooks, limit=None).count("hook") == 300


def test_a_sleep_and_a_retry_wait_read_as_durations() -> None:
    from wf.admin._words import describe_event

    assert describe_event({"type": "sleep_started", "ts": 0, "until": 172800.0}) == (
        "sleeping 2d00h"
    )
    failed = {"type": "step_retrying", "ts": 0, "name": "charge", "attempt": 1, "retry_at": 90.0}
    failed["error"] = {"type": "OSError", "message": "down"}
    assert (
        describe_event(failed)
        == "step 'charge' failed (attempt 1): OSError: down, retrying in 1m30s"
    )


def test_every_moment_a_person_reads_is_in_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait's moment (``sleep until``), a delayed run's due time and the wake-up of
    ``wf inspect``'s line are local wall time, as a runs list's created column and the terminal
    UI's times are: one moment is never UTC ISO and local time in one line."""
    from wf.admin import Explanation, Reason
    from wf.admin._words import waiting_text, why_line

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        until = 1_796_532_017.0  # 2026-12-06 04:40:17 UTC
        sleep = [{"kind": "sleep", "target": None, "until": until}]
        assert waiting_text(sleep) == "sleep until 2026-12-06 10:10:17"
        asleep = record(RunStatus.SUSPENDED, waiting_for=sleep, wake_at=until)
        assert run_info(asleep) == "sleep until 2026-12-06 10:10:17"
        assert run_info(record(RunStatus.PENDING, wake_at=until)) == "due 2026-12-06 10:10:17"
        why = Explanation(
            status="suspended", reasons=(Reason(kind="sleeping", tone="wait", at=until),),
            waiting_for=sleep, wake_at=until,  # type: ignore[arg-type]
        )  # fmt: skip
        assert why_line(why, until - 3300) == (
            "suspended: sleep until 2026-12-06 10:10:17; wakes at 2026-12-06 10:10:17 (in 55m00s)"
        )
        # A log line for shippers names it in ISO 8601, UTC: it says its zone.
        from wf.admin._words import iso_time

        assert waiting_text(sleep, at=iso_time) == "sleep until 2026-12-06T04:40:17+00:00"
    finally:
        monkeypatch.undo()
        time.tzset()
