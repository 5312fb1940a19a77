"""The journal read-model: operations, their attempts and statuses, failures (pure functions)."""

from __future__ import annotations

from typing import Any

from wf.admin import failures, operations

BOOM = {"type": "ValueError", "message": "boom", "traceback": "Traceback..."}


def ev(type_: str, ts: float, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "ts": ts, **fields}


def test_a_step_that_retries_then_completes() -> None:
    journal = [
        ev("run_started", 0.0),
        ev("step_started", 1.0, op=0, name="s", attempt=1),
        ev("step_retrying", 2.0, op=0, name="s", attempt=1, error=BOOM, retry_at=3.0),
    ]
    [row] = operations(journal, now=2.5)
    assert (row.status, row.attempts, row.retry_at) == ("retrying", 1, 3.0)
    assert row.error == {"type": "ValueError", "message": "boom"}

    journal += [
        ev("step_started", 3.0, op=0, name="s", attempt=2),
        ev("step_completed", 4.0, op=0, name="s", attempt=2, result=1),
    ]
    [row] = operations(journal, now=5.0)
    assert (row.status, row.attempts, row.duration) == ("completed", 2, 3.0)
    assert [(e.name, e.attempt, e.retried) for e in failures(journal)] == [("s", 1, True)]


def test_a_step_left_running_by_a_stopped_run_is_interrupted() -> None:
    journal = [ev("step_started", 1.0, op=0, name="s", attempt=1)]
    assert operations(journal, run_status="running")[0].status == "running"
    assert operations(journal, run_status="suspended")[0].status == "interrupted"


def test_a_step_of_a_losing_select_branch_is_cancelled_by_the_decision() -> None:
    """A step in a helper coroutine that lost a select ended with the decision: named in its
    ``cancelled``, or (a journal of a wf that named there only losing steps themselves) in
    its ``lost_ops``, the ids of the losing branches, which a replay never runs."""
    started = [ev("step_started", 1.0, op=3, name="s", attempt=1)]
    for decided in (
        ev("select_decided", 2.0, op=2, name="select", index=0, cancelled=[3], lost_ops=[3]),
        ev("select_decided", 2.0, op=2, name="select", index=0, lost_ops=[3]),
    ):
        [row] = operations([*started, decided], run_status="running")
        assert (row.status, row.duration) == ("cancelled", 1.0)
    done = ev("step_completed", 1.5, op=3, name="s", attempt=1, result=1)
    lost = ev("select_decided", 2.0, op=2, name="select", index=0, lost_ops=[3])
    [row] = operations([*started, done, lost], run_status="running")
    assert row.status == "completed"  # it ended before the decision: as it ended


def test_a_patch_marker_is_an_operation_of_its_own() -> None:
    """A replay meets the marker where it was recorded: the tables show it, so the operation
    numbers a divergence names match what people see."""
    journal = [
        ev("patch_recorded", 1.0, op=0, name="sms-instead-of-email"),
        ev("step_started", 2.0, op=1, name="notify", attempt=1),
    ]
    marker, step = operations(journal, run_status="running")
    assert (marker.op, marker.kind, marker.name, marker.status) == (
        0,
        "patch",
        "sms-instead-of-email",
        "recorded",
    )
    assert (step.op, step.kind) == (1, "step")


def test_sleeps_end_at_their_deadline_or_when_woken() -> None:
    journal = [ev("sleep_started", 1.0, op=0, name="sleep", until=100.0)]
    assert operations(journal, now=50.0)[0].status == "sleeping"
    assert operations(journal, now=150.0)[0].status == "done"
    woken = [*journal, ev("wake_requested", 10.0)]
    [row] = operations(woken, now=50.0)
    assert (row.status, row.finished_at) == ("done", 10.0)


def test_a_hook_left_waiting_by_a_run_that_ended_is_cancelled_as_a_sleep_is() -> None:
    journal = [
        ev("hook_created", 1.0, op=0, name="hook", token="tok"),
        ev("sleep_started", 1.0, op=1, name="sleep", until=100.0),
    ]
    assert [r.status for r in operations(journal, run_status="suspended", now=5.0)] == [
        "waiting",
        "sleeping",
    ]
    ended = [*journal, ev("run_cancelled", 5.0)]
    hook, sleep = operations(ended, run_status="cancelled", now=50.0)
    assert (
        (hook.status, hook.finished_at) == (sleep.status, sleep.finished_at) == ("cancelled", 5.0)
    )
    # One that got its payload keeps saying so.
    received = [*journal, ev("hook_payload", 2.0, hook=0), ev("run_completed", 5.0)]
    assert operations(received, run_status="completed")[0].status == "received"
    # A record that says the run ended, though its journal's outcome is not there (yet).
    assert operations(journal, run_status="cancelled", now=9.0)[0].status == "cancelled"
