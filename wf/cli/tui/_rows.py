"""Rows of the run screen's tables and its header, built from a ``RunView`` (no widgets here).

Kept apart from the screen so that what is shown can be read, and tested, as plain data.
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text

from wf.admin import explain
from wf.admin._words import REPLAY_STYLE, describe_event, recovery_text, replay_detail, visible
from wf.cli.tui._model import RunView
from wf.cli.tui._text import (
    at,
    duration,
    error_text,
    plain,
    relative,
    short,
    status_text,
    timestamp,
)
from wf.cli.tui._why import lines

STEP_COLUMNS = ("op", "kind", "name", "status", "attempts", "started", "duration", "error / until")
EVENT_COLUMNS = ("#", "time", "type", "details")
HOOK_COLUMNS = ("token", "op", "status", "payloads", "created", "payload type")
FAMILY_COLUMNS = ("relation", "id", "workflow", "status")

_TONES = {"ok": "green", "wait": "yellow", "info": "cyan", "warn": "yellow", "error": "red"}
_EVENT_NOISE = frozenset({"type", "ts"})


def header(view: RunView, replays: dict[str, Any] | None = None) -> Text:
    """The run's name and status, why it is there (in words), and its times and parent; with
    ``replays`` (the replay check the ``p`` key runs), whether the code here still replays it.

    Recorded text (names, errors, tokens) is appended as text, its controls shown."""
    run = view.run
    text = Text()
    text.append(run["id"], style="bold")
    text.append("  ")
    text.append(visible(run["workflow"]), style="bold cyan")
    text.append("  ")
    text.append_text(status_text(run["status"]))
    if view.data.get("cancel_requested"):
        text.append("  cancel requested", style="bold red")
    if run.get("resumes"):
        text.append(f"  resumed {run['resumes']}×", style="dim")
    recoveries = view.data.get("recoveries") or []
    if recoveries:
        text.append(f"  recovered {len(recoveries)}× from a dead driver", style="yellow")
    if run.get("deployment"):
        text.append(f"  deployment {visible(run['deployment'])}", style="dim")
    why = explain(view.detail)  # the detail says whether its driver is gone
    for reason in lines(why, view.now):
        text.append("\n▸ ", style=_TONES.get(reason.tone, ""))
        text.append(visible(reason.text, newlines=True), style=_TONES.get(reason.tone, ""))
    if recoveries:
        tone = _TONES["error" if recoveries[-1].get("stalled") else "warn"]
        text.append(f"\n▸ {visible(recovery_text(recoveries[-1]))}", style=tone)
    if replays is not None:
        status = replays["status"]
        text.append("\n▸ replay against the current code: ")
        text.append(status, style=REPLAY_STYLE.get(status, ""))
        detail = replay_detail(replays)
        if detail:
            text.append(f": {visible(detail)}")
    # The record is saved when the run changes state; a chunk or a step appended since is newer.
    events = view.data["events"]
    last = events[-1].get("ts") if events else None
    latest = max(run["updated_at"], last if isinstance(last, int | float) else 0.0)
    updated = relative(latest, view.now)
    text.append(f"\ncreated {timestamp(run['created_at'])} · updated {updated}", style="dim")
    if run.get("parent_id"):
        text.append(f" · parent {run['parent_id']} (u)", style="dim")
    if run.get("schedule_id"):
        text.append(f" · started by schedule {visible(run['schedule_id'])}", style="dim")
    return text


MAX_STEPS = 5000
"""Operations the steps tab shows, the latest ones (the events tab keeps as many events): a
run of 30,000 steps took seconds to lay out on every reload."""


def step_rows(view: RunView) -> list[tuple[str, tuple[Any, ...]]]:
    """(row key, cells) per operation (the latest ``MAX_STEPS``): steps, sleeps, hooks and
    child runs, in op order."""
    out = []
    for row in view.data["steps"][-MAX_STEPS:]:
        if row["error"] and row["status"] == "completed":
            detail = f"earlier attempt: {error_text(row['error'])}"
        elif row["error"]:
            detail = error_text(row["error"])
        elif row["kind"] == "sleep" and row["until"] is not None:
            detail = f"until {at(row['until'], view.now)}"
        elif row["status"] == "retrying" and row["retry_at"] is not None:
            detail = f"retry {relative(row['retry_at'], view.now)}"
        else:
            detail = ""
        # Recorded text as Text: a str cell is read as markup (``[@click=...]``, ``[/]``).
        cells = (
            str(row["op"]),
            row["kind"],
            plain(row["name"], 40),
            status_text(row["status"]),
            str(row["attempts"] or ""),
            timestamp(row["started_at"]),
            duration(row["duration"]) if row["duration"] is not None else "",
            plain(detail, 240),  # the table scrolls sideways; the screen decides what shows
        )
        out.append((f"op{row['op']}", cells))
    return out


def event_row(index: int, event: dict[str, Any]) -> tuple[Any, ...]:
    """One journal event: its index, time, type and what it says."""
    kind = event.get("type")
    line = describe_event(event)
    if kind == "run_started":
        line = f"run of {event.get('workflow')} started"
    elif kind in ("run_completed", "run_cancelled"):
        line = kind.replace("_", " ")
    elif kind == "run_failed":
        line = f"run failed: {error_text(event.get('error'))}"
    elif kind == "hook_waiting":
        line = (
            f"waits for the next payload on the hook of op {event.get('hook')} "
            f"(type {event.get('name')})"
        )
    elif kind == "hook_disposed":
        line = f"hook of op {event.get('hook')} disposed"
    elif kind == "hook_conflict_checked":
        owner = event.get("owner")
        line = f"token already held by run {owner}" if owner else "token held by no other run"
    if line is None:
        rest = {k: v for k, v in event.items() if k not in _EVENT_NOISE}
        line = json.dumps(rest, ensure_ascii=False, default=str)
    ts = event.get("ts")
    return (
        str(index),
        timestamp(ts) if isinstance(ts, int | float) else "",
        plain(event.get("type", "?")),
        plain(line, 100),
    )


def chunk_group(event: dict[str, Any]) -> tuple[Any, ...] | None:
    """What consecutive ``stream_write`` events share to be shown as one row, or None."""
    if event.get("type") != "stream_write":
        return None
    return (event.get("step"), event.get("stream"))


def chunk_row(first: int, last: int, count: int, event: dict[str, Any]) -> tuple[Any, ...]:
    """The row of a burst of ``count`` chunk writes, events ``first``..``last``."""
    ts = event.get("ts")
    stream = event.get("stream") or "default"
    step = event.get("step")
    start = event.get("index")
    chunks = f"chunks {int(start) - count + 1}–{start}" if isinstance(start, int) else "chunks"
    by = f" by step op {step}" if step is not None else ""
    return (
        f"{first}–{last}",
        timestamp(ts) if isinstance(ts, int | float) else "",
        f"stream_write ×{count}",
        plain(f"{count} chunks written to stream {stream!r}{by} ({chunks})"),
    )


def hook_rows(view: RunView) -> list[tuple[str, tuple[Any, ...]]]:
    """The run's hooks: live ones from the store, with their state from the journal."""
    by_token = {row["name"]: row for row in view.data["steps"] if row["kind"] == "hook"}
    out = []
    for hook in view.data["hooks"]:
        row = by_token.get(hook["token"], {})
        schema = hook.get("schema") or {}
        cells = (
            plain(hook["token"], 40),
            str(hook["op"]),
            status_text(row.get("status", "waiting")),
            str(row.get("attempts", 0)),
            timestamp(hook.get("created_at")) if hook.get("created_at") else "",
            plain(schema.get("type") or "any"),
        )
        out.append((hook["token"], cells))
    return out


def family_rows(view: RunView) -> list[tuple[str, tuple[Any, ...]]]:
    """The parent (if any), then the child runs: enter opens one."""
    out: list[tuple[str, tuple[Any, ...]]] = []
    parent = view.run.get("parent_id")
    if parent:
        out.append((parent, ("parent", parent, "", "")))
    for child in view.data["children"]:
        cells = (
            "child",
            child["id"],
            plain(child["workflow"]),
            status_text(child["status"]),
        )
        out.append((child["id"], cells))
    return out


def op_detail(view: RunView, op: int) -> str:
    """Everything about one operation for the detail pop-up, in words: what it was called
    with, what it returned or raised, its attempts and timing, then each failure's traceback."""
    row = next((r for r in view.data["steps"] if r["op"] == op), None)
    if row is None:
        return f"no operation {op} in this run"
    lines = [f"{row['kind']} {row['name']!r}: {row['status']}"]
    if row["kind"] == "step":
        lines.append(f"arguments: {_arguments_text(row.get('args'))}")
        result = _step_result(view, op)
        if result is not _NOTHING:
            lines.append(f"result: {_value_text(result)}")
    if row.get("error"):
        lines.append(f"error: {error_text(row['error'])}")
    attempts = row.get("attempts") or 0
    if row["kind"] == "step" and attempts:
        retries = attempts - 1
        lines.append(
            f"attempts: {attempts}"
            + (f" ({retries} retr{'y' if retries == 1 else 'ies'})" if retries else "")
        )
    if row.get("retry_at"):
        lines.append(f"next attempt: {at(row['retry_at'], view.now)}")
    if row.get("until"):
        lines.append(f"until: {at(row['until'], view.now)}")
    timing = f"started {timestamp(row['started_at'])}"
    if row.get("finished_at"):
        timing += f", finished {timestamp(row['finished_at'])}"
    if row.get("duration") is not None:
        timing += f" (took {duration(row['duration'])})"
    elif row["status"] in ("running", "sleeping", "waiting"):
        timing += f" ({duration(max(0.0, view.now - row['started_at']))} so far)"
    lines.append(timing)
    for error in view.data["errors"]:
        if error["op"] == op:
            lines.append(
                f"\nattempt {error['attempt']} ({'retried' if error['retried'] else 'final'}): "
                f"{error_text(error)}"
            )
            if error.get("traceback"):
                lines.append(str(error["traceback"]).rstrip())
    return "\n".join(lines)


_NOTHING = object()


def _step_result(view: RunView, op: int) -> Any:
    for event in reversed(view.data["events"]):
        if event.get("op") == op and event.get("type") == "step_completed":
            return event.get("result")
    return _NOTHING


def _arguments_text(recorded: Any) -> str:
    """``'o-1', cents=1299`` from what ``step_started`` recorded."""
    if recorded is None:
        return "not recorded (a run from an older wf)"
    if not isinstance(recorded, dict):
        return _value_text(recorded)
    if "unrecorded" in recorded:
        return f"not recorded: {recorded['unrecorded']}"
    if recorded.get("truncated"):
        return f"{recorded.get('preview', '')}… (truncated: {recorded.get('size')} bytes in all)"
    parts = [_value_text(a) for a in recorded.get("args") or []]
    parts += [f"{k}={_value_text(v)}" for k, v in (recorded.get("kwargs") or {}).items()]
    return ", ".join(parts) if parts else "none"


def _value_text(value: Any) -> str:
    """A recorded (tagged JSON) value, compact: ``datetime 2027-01-01T00:00:00`` for tags."""
    if isinstance(value, dict) and "$t" in value:
        tag = str(value["$t"]) + (f" {value['cls']}" if value.get("cls") else "")
        inner = value.get("v", value.get("json"))
        if tag == "dict" and isinstance(inner, dict):
            return short(json.dumps(inner, ensure_ascii=False, default=str), 400)
        return short(f"{tag} {json.dumps(inner, ensure_ascii=False, default=str)}", 400)
    return short(json.dumps(value, ensure_ascii=False, default=str), 400)
