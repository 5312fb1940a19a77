"""Rows of the run screen's tables and its header, built from a ``RunView`` (no widgets here).

Kept apart from the screen so that what is shown can be read, and tested, as plain data.
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text

from wf.admin import explain
from wf.cli._format import REPLAY_STYLE, replay_detail
from wf.cli._journal import describe_event
from wf.cli.tui._model import RunView
from wf.cli.tui._text import at, duration, error_text, relative, short, status_text, timestamp
from wf.cli.tui._why import lines

STEP_COLUMNS = ("op", "kind", "name", "status", "attempts", "started", "duration", "error / until")
EVENT_COLUMNS = ("#", "time", "type", "details")
HOOK_COLUMNS = ("token", "op", "status", "payloads", "created", "payload type")
FAMILY_COLUMNS = ("relation", "id", "workflow", "status")

_TONES = {"ok": "green", "wait": "yellow", "info": "cyan", "warn": "yellow", "error": "red"}
_EVENT_NOISE = frozenset({"type", "ts"})


def header(view: RunView, replays: dict[str, Any] | None = None) -> Text:
    """The run's name and status, why it is there (in words), and its times and parent; with
    ``replays`` (the replay check the ``p`` key runs), whether the code here still replays it."""
    run = view.run
    text = Text()
    text.append(run["id"], style="bold")
    text.append("  ")
    text.append(run["workflow"], style="bold cyan")
    text.append("  ")
    text.append_text(status_text(run["status"]))
    if view.data.get("cancel_requested"):
        text.append("  cancel requested", style="bold red")
    if run.get("resumes"):
        text.append(f"  resumed {run['resumes']}×", style="dim")
    if run.get("deployment"):
        text.append(f"  deployment {run['deployment']}", style="dim")
    why = explain(view.detail, driver_gone=view.driver_gone)
    for reason in lines(why, view.now):
        text.append("\n▸ ", style=_TONES.get(reason.tone, ""))
        text.append(reason.text, style=_TONES.get(reason.tone, ""))
    if replays is not None:
        status = replays["status"]
        text.append("\n▸ replay against the current code: ")
        text.append(status, style=REPLAY_STYLE.get(status, ""))
        detail = replay_detail(replays)
        if detail:
            text.append(f": {detail}")
    updated = relative(run["updated_at"], view.now)
    text.append(f"\ncreated {timestamp(run['created_at'])} · updated {updated}", style="dim")
    if run.get("parent_id"):
        text.append(f" · parent {run['parent_id']} (u)", style="dim")
    return text


def step_rows(view: RunView) -> list[tuple[str, tuple[Any, ...]]]:
    """(row key, cells) per operation: steps, sleeps, hooks and child runs, in op order."""
    out = []
    for row in view.data["steps"]:
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
        cells = (
            str(row["op"]),
            row["kind"],
            short(row["name"], 40),
            status_text(row["status"]),
            str(row["attempts"] or ""),
            timestamp(row["started_at"]),
            duration(row["duration"]) if row["duration"] is not None else "",
            short(detail, 70),
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
    if line is None:
        rest = {k: v for k, v in event.items() if k not in _EVENT_NOISE}
        line = json.dumps(rest, ensure_ascii=False, default=str)
    ts = event.get("ts")
    return (
        str(index),
        timestamp(ts) if isinstance(ts, int | float) else "",
        str(event.get("type", "?")),
        short(line, 100),
    )


def hook_rows(view: RunView) -> list[tuple[str, tuple[Any, ...]]]:
    """The run's hooks: live ones from the store, with their state from the journal."""
    by_token = {row["name"]: row for row in view.data["steps"] if row["kind"] == "hook"}
    out = []
    for hook in view.data["hooks"]:
        row = by_token.get(hook["token"], {})
        schema = hook.get("schema") or {}
        cells = (
            short(hook["token"], 40),
            str(hook["op"]),
            status_text(row.get("status", "waiting")),
            str(row.get("attempts", 0)),
            timestamp(hook.get("created_at")) if hook.get("created_at") else "",
            str(schema.get("type") or "any"),
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
        cells = ("child", child["id"], child["workflow"], status_text(child["status"]))
        out.append((child["id"], cells))
    return out


def op_detail(view: RunView, op: int) -> str:
    """Everything about one operation for the detail pop-up: its row, errors and tracebacks."""
    row = next((r for r in view.data["steps"] if r["op"] == op), None)
    lines = [json.dumps(row, indent=2, ensure_ascii=False, default=str)] if row else []
    for error in view.data["errors"]:
        if error["op"] == op:
            lines.append(
                f"\nattempt {error['attempt']} ({'retried' if error['retried'] else 'final'}): "
                f"{error['type']}: {error['message']}"
            )
            if error.get("traceback"):
                lines.append(str(error["traceback"]).rstrip())
    return "\n".join(lines)
