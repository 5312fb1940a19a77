"""Reading a run's journal for people: one row per operation, the errors, the current waits.

Pure functions over journal events (no store, no I/O), shared by the live view of ``wf run`` and
by ``wf inspect`` (and, later, its terminal UI).
"""

from __future__ import annotations

import time
from typing import Any

from wf.cli._format import error_text

OUTCOME_TYPES = frozenset({"run_completed", "run_failed", "run_cancelled"})

# Journal events that open a row (an operation shown to people), and the row's kind.
_ROW_KINDS = {
    "step_started": "step",
    "step_completed": "step",
    "step_retrying": "step",
    "step_failed": "step",
    "sleep_started": "sleep",
    "hook_created": "hook",
    "child_started": "child",
}

# Events about a hook that carry the hook's operation id in ``hook`` (their own ``op``, if any,
# is the id of the ``next()``/``dispose()`` call).
_HOOK_EVENTS = frozenset({"hook_waiting", "hook_payload", "hook_disposed"})


def _new_row(op: int, kind: str, name: str, ts: float) -> dict[str, Any]:
    return {
        "op": op,
        "kind": kind,
        "name": name,
        "status": "running",
        "attempts": 0,
        "started_at": ts,
        "finished_at": None,
        "duration": None,
        "error": None,
        "retry_at": None,
        "until": None,
    }


def operation_rows(
    journal: list[dict[str, Any]], *, run_status: str | None = None, now: float | None = None
) -> list[dict[str, Any]]:
    """One row per step, sleep, hook or child run of the run, in operation order.

    Each row: ``op``, ``kind`` (step/sleep/hook/child), ``name`` (a step's name, a hook's token,
    a child's run id), ``status``, ``attempts``, ``started_at``, ``finished_at``, ``duration``
    (seconds, once finished), ``error`` (``{"type", "message"}`` of the latest failure),
    ``retry_at`` (a step waiting to retry) and ``until`` (a sleep's deadline).

    Step statuses: ``running``, ``retrying``, ``completed``, ``failed``, and ``interrupted`` for a
    step that was running when the run stopped being driven (``run_status`` not running). Sleeps:
    ``sleeping`` or ``done``. Hooks: ``waiting``, ``received`` (``attempts`` counts payloads),
    ``disposed``. Child runs: ``running``, then the child's final status.
    """
    now = time.time() if now is None else now
    rows: dict[int, dict[str, Any]] = {}
    children: dict[str, dict[str, Any]] = {}
    woken_after: float | None = None
    finished = False
    for event in journal:
        kind_of = event.get("type", "")
        ts = float(event.get("ts", 0.0))
        if kind_of == "wake_requested":
            woken_after = ts
        elif kind_of in OUTCOME_TYPES:
            finished = True
        elif kind_of in _HOOK_EVENTS:
            hook_op = event.get("hook")
            hook = rows.get(hook_op) if isinstance(hook_op, int) else None
            if hook is not None:
                _apply_hook(hook, kind_of, ts)
        elif kind_of == "child_finished":
            child = children.get(str(event.get("child")))
            if child is not None:
                child["status"] = str(event.get("status") or "done")
                child["error"] = _error(event.get("error"))
                _finish(child, ts)
        row_kind = _ROW_KINDS.get(kind_of)
        op = event.get("op")
        if row_kind is None or not isinstance(op, int):
            continue
        row = rows.get(op)
        if row is None:
            if row_kind == "hook":
                name = event.get("token")
            elif row_kind == "child":
                name = event.get("child")
            else:
                name = event.get("name")
            row = rows[op] = _new_row(op, row_kind, str(name or row_kind), ts)
            if row_kind == "child":
                children[row["name"]] = row
        _apply(row, kind_of, event, ts)
    for row in rows.values():
        if row["kind"] == "sleep" and row["status"] == "sleeping":
            until = row["until"]
            woken = woken_after is not None and woken_after >= row["started_at"]
            if finished or woken or (until is not None and until <= now):
                row["status"] = "done"
                row["finished_at"] = min(until, now) if until is not None else now
                if woken and woken_after is not None:
                    row["finished_at"] = min(row["finished_at"], woken_after)
                row["duration"] = row["finished_at"] - row["started_at"]
        stopped = finished or run_status not in (None, "running", "pending")
        if row["status"] == "running" and row["kind"] == "step" and stopped:
            row["status"] = "interrupted"
    return [rows[op] for op in sorted(rows)]


def _apply(row: dict[str, Any], kind_of: str, event: dict[str, Any], ts: float) -> None:
    attempt = event.get("attempt")
    if isinstance(attempt, int):
        row["attempts"] = max(row["attempts"], attempt)
    if kind_of == "step_started":
        row["status"] = "running"
        row["retry_at"] = None
    elif kind_of == "step_completed":
        row["status"] = "completed"
        row["retry_at"] = None
        _finish(row, ts)
    elif kind_of == "step_retrying":
        row["status"] = "retrying"
        row["retry_at"] = event.get("retry_at")
        row["error"] = _error(event.get("error"))
    elif kind_of == "step_failed":
        row["status"] = "failed"
        row["retry_at"] = None
        row["error"] = _error(event.get("error"))
        _finish(row, ts)
    elif kind_of == "sleep_started":
        row["status"] = "sleeping"
        row["until"] = event.get("until")
    elif kind_of == "hook_created":
        row["status"] = "waiting"


def _apply_hook(row: dict[str, Any], kind_of: str, ts: float) -> None:
    if kind_of == "hook_payload":
        row["attempts"] += 1
        row["status"] = "received"
    elif kind_of == "hook_disposed":
        row["status"] = "disposed"
        _finish(row, ts)


def _finish(row: dict[str, Any], ts: float) -> None:
    row["finished_at"] = ts
    row["duration"] = ts - row["started_at"]


def _error(info: Any) -> dict[str, Any] | None:
    if not isinstance(info, dict):
        return None
    return {"type": info.get("type"), "message": info.get("message")}


def errors(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every recorded failure, oldest first: failed step attempts (retried or not) and the run's.

    Each: ``ts``, ``op`` (None for the run), ``name``, ``attempt``, ``retried`` (bool), ``type``,
    ``message``, ``traceback``.
    """
    out: list[dict[str, Any]] = []
    for event in journal:
        kind_of = event.get("type")
        if kind_of not in ("step_retrying", "step_failed", "run_failed"):
            continue
        info = event.get("error") if isinstance(event.get("error"), dict) else {}
        assert isinstance(info, dict)
        out.append(
            {
                "ts": event.get("ts"),
                "op": event.get("op"),
                "name": event.get("name", "run" if kind_of == "run_failed" else None),
                "attempt": event.get("attempt"),
                "retried": kind_of == "step_retrying",
                "type": info.get("type"),
                "message": info.get("message"),
                "traceback": info.get("traceback"),
            }
        )
    return out


def describe_event(event: dict[str, Any]) -> str | None:
    """One line for a journal event in a progress log, or None for bookkeeping events."""
    kind_of = event.get("type")
    name = event.get("name")
    attempt = event.get("attempt")
    if kind_of == "step_started":
        again = f" (attempt {attempt})" if isinstance(attempt, int) and attempt > 1 else ""
        return f"step {name!r} started{again}"
    if kind_of == "step_completed":
        return f"step {name!r} completed"
    if kind_of == "step_retrying":
        retry_at = event.get("retry_at")
        wait = ""
        if isinstance(retry_at, int | float):
            wait = f", retrying in {max(0.0, retry_at - float(event.get('ts', 0))):.2f}s"
        return f"step {name!r} failed (attempt {attempt}): {error_text(event.get('error'))}{wait}"
    if kind_of == "step_failed":
        return f"step {name!r} failed (attempt {attempt}): {error_text(event.get('error'))}"
    if kind_of == "sleep_started":
        until = event.get("until")
        if isinstance(until, int | float):
            return f"sleeping {max(0.0, until - float(event.get('ts', 0))):.2f}s"
        return "sleeping"
    if kind_of == "run_suspended":
        return f"run suspended: {event.get('waiting_for') or 'waiting'}"
    if kind_of == "run_resumed":
        return "run resumed"
    if kind_of == "cancel_requested":
        return "cancellation requested"
    if kind_of == "wake_requested":
        return "wake-up requested"
    if kind_of == "hook_created":
        return f"hook {event.get('token')!r} created"
    if kind_of == "hook_payload":
        return f"hook {event.get('token')!r} received a payload"
    if kind_of == "child_started":
        return f"child run {event.get('child')} ({name}) started"
    if kind_of == "child_finished":
        return f"child run {event.get('child')} {event.get('status')}"
    if kind_of == "timeout_started":
        return "timeout started"
    return None
