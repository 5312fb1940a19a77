"""The live table ``wf run`` draws on a terminal (``wf.cli._progress.LiveSink``): a long run's
latest operations, made again at a pace its cost allows, and always the run's end."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from wf.cli import _progress
from wf.store import RunRecord, RunStatus


def steps(first: int, last: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for op in range(first, last):
        events.append({"type": "step_started", "op": op, "name": f"s{op}", "ts": 1.0 + op})
        events.append({"type": "step_completed", "op": op, "name": f"s{op}", "ts": 1.5 + op})
    return events


def shown(sink: _progress.LiveSink) -> str:
    console = Console(record=True, width=120)
    console.print(sink._render())
    return console.export_text()


def test_a_long_run_shows_its_latest_operations_and_how_many_came_before() -> None:
    sink = _progress.LiveSink()
    record = RunRecord(id="wrun_x", workflow="app:long", status=RunStatus.RUNNING)
    sink.update(record, steps(0, 100), [])
    text = shown(sink)
    assert f"… {100 - _progress.SHOWN} earlier operations" in text
    assert "s99" in text and f"s{100 - _progress.SHOWN}" in text
    assert f"s{99 - _progress.SHOWN} " not in text


def test_the_last_frame_shows_how_the_run_ended_whatever_the_pace() -> None:
    sink = _progress.LiveSink()
    running = RunRecord(id="wrun_x", workflow="app:long", status=RunStatus.RUNNING)
    sink.update(running, steps(0, 3), [])
    assert "s2" in shown(sink)
    sink._next_rows = float("inf")  # a long journal: the rows are not made again for a while
    journal = steps(0, 5)
    sink.update(running, journal, journal[6:])
    assert "s4" not in shown(sink)  # paced: the last rows made
    done = RunRecord(id="wrun_x", workflow="app:long", status=RunStatus.COMPLETED)
    sink.update(done, journal, [])
    assert "s4" in shown(sink)  # the end is drawn at once


def test_a_huge_step_error_takes_a_few_lines_of_the_table_not_megabytes() -> None:
    sink = _progress.LiveSink()
    record = RunRecord(id="wrun_x", workflow="app:big", status=RunStatus.RUNNING)
    error = {"type": "ValueError", "message": "x" * 1_000_000}
    journal = [
        {"type": "step_started", "op": 0, "name": "s0", "ts": 1.0},
        {"type": "step_failed", "op": 0, "name": "s0", "ts": 1.5, "error": error},
    ]
    sink.update(record, journal, [])
    text = shown(sink)
    assert "ValueError:" in text and "…" in text
    assert text.count("x") < 2 * _progress.DETAIL_LIMIT


def test_plain_lines_of_several_calls_of_one_step_name_their_operation(
    capsys: Any,
) -> None:
    sink = _progress.PlainSink()
    branches = [{"type": "step_started", "op": op, "name": "sq", "ts": 1.0} for op in range(2)] + [
        {"type": "step_completed", "op": op, "name": "sq", "ts": 2.0} for op in range(2)
    ]
    record = RunRecord("r", "flows:many", RunStatus.RUNNING)
    sink.update(record, branches, branches)
    assert capsys.readouterr().err.splitlines() == [
        "wf: step 'sq' #0 started",
        "wf: step 'sq' #1 started",
        "wf: step 'sq' #0 completed in 1.00s",
        "wf: step 'sq' #1 completed in 1.00s",
    ]
