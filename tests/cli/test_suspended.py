"""What ``wf run`` says while the run it drives is suspended (``wf.cli._suspended``)."""

from __future__ import annotations

from wf._events import waiting
from wf.cli._suspended import waiting_here
from wf.store import RunRecord, RunStatus


def _suspended(*waits: dict[str, object], wake_at: float | None = 100.0) -> RunRecord:
    return RunRecord(
        id="r1",
        workflow="flows:f",
        status=RunStatus.SUSPENDED,
        wake_at=wake_at,
        waiting_for=list(waits),  # type: ignore[arg-type]
    )


def test_a_hook_under_a_timeout_is_answered_with_hook_resume_not_wake() -> None:
    said = waiting_here(
        _suspended(waiting("hook", "approve:e-1"), waiting("timeout", None, 100.0)), 0
    )
    assert "`wf hook resume approve:e-1 --data JSON` delivers the hook's payload now" in said
    assert "wf wake" not in said


def test_a_sleep_still_names_wake() -> None:
    said = waiting_here(_suspended(waiting("sleep", None, 100.0)), 0)
    assert said.endswith("when it is due, or `wf wake r1` ends a sleep now")
