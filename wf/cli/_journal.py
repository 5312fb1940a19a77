"""Journal events in words, for the live view of ``wf run``, ``wf inspect`` and its terminal UI.

The read-model of a journal (operations, attempts, failures) is ``wf.admin``'s; this only
renders.
"""

from __future__ import annotations

from typing import Any

from wf.cli._format import error_text, recovery_text, waiting_text


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
        return f"run suspended: {waiting_text(event.get('waiting_for')) or 'waiting'}"
    if kind_of == "run_resumed":
        if event.get("recoveries"):
            return "run resumed: " + recovery_text(
                {"in_a_row": event["recoveries"], "steps": event.get("steps")}
            )
        return "run resumed"
    if kind_of == "run_attempt":
        return f"run started (attempt {attempt})"
    if kind_of == "run_retrying":
        again = "queued by hand" if event.get("manual") else "retrying"
        return f"run {again}: attempt {attempt} of {event.get('max_attempts')}"
    if kind_of == "progress":
        return f"progress: {_short(event.get('data'))}"
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


def _short(value: Any, limit: int = 80) -> str:
    """Tagged JSON on one line, cut to ``limit`` characters."""
    import orjson

    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"
