"""Journal events in words (the live view, ``wf inspect``)."""

from __future__ import annotations

from typing import Any

from wf.admin._words import describe_event, timestamp

BOOM = {"type": "ValueError", "message": "boom", "traceback": "Traceback..."}


def ev(type_: str, ts: float, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "ts": ts, **fields}


def test_describe_event() -> None:
    assert describe_event(ev("step_started", 0, op=0, name="a", attempt=2)) == (
        "step 'a' started (attempt 2)"
    )
    assert describe_event(ev("step_failed", 0, op=0, name="a", attempt=3, error=BOOM)) == (
        "step 'a' failed (attempt 3): ValueError: boom"
    )
    assert describe_event(ev("run_suspended", 0, waiting_for="sleep until X")) == (
        "run suspended: sleep until X"  # a journal written before waiting_for was structured
    )
    waits = [
        {"kind": "hook", "target": "k1", "until": None},
        {"kind": "sleep", "target": None, "until": 0.0},
    ]
    assert describe_event(ev("run_suspended", 0, waiting_for=waits)) == (
        f"run suspended: hook 'k1'; sleep until {timestamp(0.0)}"  # local, as every time shown
    )
    assert describe_event(ev("value_recorded", 0, op=0, name="now")) is None
