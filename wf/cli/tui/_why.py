"""Why a run is where it is, in words: the answer to "why isn't my run moving?".

Pure functions over ``gather_run`` data plus two facts the JSON does not hold: the run's unread
inbox (a payload or a cancel request waiting for the next driver) and whether a process still
drives it. The record's ``waiting_for`` names what a suspended run waits on (``sleep until …``,
``hook 'tok'``, ``child run …``, ``retry of step 'x'``, joined by ``; ``); the journal's rows add
the details (deadlines, attempts, errors).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from wf.cli.tui._text import at, duration, error_text

_HOOK = re.compile(r"^hook '(?P<token>.*)'$")
_CHILD = re.compile(r"^child run (?P<id>\S+)$")
_RETRY = re.compile(r"^retry of step '(?P<name>.*)'$")
_SLEEP = re.compile(r"^sleep until ")


@dataclasses.dataclass(frozen=True)
class Reason:
    """One line of the explanation. ``tone``: ``info``, ``wait``, ``ok``, ``warn``, ``error``."""

    tone: str
    text: str


def explain(
    data: dict[str, Any],
    now: float,
    *,
    inbox: list[str] | None = None,
    driver_gone: bool | None = None,
) -> list[Reason]:
    """The lines of the run screen's header below the run's name.

    ``inbox``: kinds of the unread messages (``hook``, ``cancel``, ``wake``, ``child_done``).
    ``driver_gone``: True when a running run's lock is free (its process died), None if unknown.
    """
    run = data["run"]
    status = run["status"]
    lines = _by_status(data, status, now, driver_gone)
    if run.get("cancel_requested") and status not in ("cancelled", "completed", "failed"):
        lines.append(Reason("warn", "Cancellation requested: applied when the run is next driven."))
    pending = [kind for kind in inbox or [] if kind != "cancel"]
    if pending and status in ("suspended", "pending"):
        lines.append(
            Reason(
                "warn",
                f"{len(pending)} message(s) not yet delivered ({', '.join(sorted(set(pending)))}):"
                " the run is due, the next worker delivers them.",
            )
        )
    return lines


def _by_status(
    data: dict[str, Any], status: str, now: float, driver_gone: bool | None
) -> list[Reason]:
    run = data["run"]
    took = duration(run["updated_at"] - run["created_at"])
    if status == "pending":
        return [Reason("info", "Queued, not started yet: the next `wf worker` starts it.")]
    if status == "completed":
        return [Reason("ok", f"Completed in {took}.")]
    if status == "cancelled":
        return [Reason("warn", f"Cancelled after {took}.")]
    if status == "failed":
        return [_failure(data)]
    if status == "running":
        return _running(data, now, driver_gone)
    return _suspended(data, now)


def _failure(data: dict[str, Any]) -> Reason:
    failed = [r for r in data["steps"] if r["status"] == "failed"]
    where = ""
    if failed:
        row = failed[-1]
        where = f" in step {row['name']!r} after {row['attempts']} attempt(s)"
    return Reason("error", f"Failed{where} with error {error_text(data['run'].get('error'))}")


def _running(data: dict[str, Any], now: float, driver_gone: bool | None) -> list[Reason]:
    lines: list[Reason] = []
    if driver_gone:
        done = sum(1 for r in data["steps"] if r["status"] in ("completed", "done", "received"))
        lines.append(
            Reason(
                "error",
                "Driver process gone: nobody holds this run's lock. A worker will recover it, "
                f"replaying its journal ({done} operation(s) done) without repeating them.",
            )
        )
    for row in data["steps"]:
        if row["kind"] == "step" and row["status"] == "running":
            attempt = f" (attempt {row['attempts']})" if row["attempts"] > 1 else ""
            since = duration(now - row["started_at"])
            verb = "Was running" if driver_gone else "Running"
            lines.append(Reason("info", f"{verb} step {row['name']!r}{attempt} for {since}."))
        elif row["status"] == "retrying":
            lines.append(_retry(data, row, now))
        elif row["kind"] == "sleep" and row["status"] == "sleeping":
            lines.append(Reason("wait", f"Sleeping until {at(row['until'], now)}."))
    if not lines:
        lines.append(Reason("info", "Running, between operations."))
    return lines


def _suspended(data: dict[str, Any], now: float) -> list[Reason]:
    run = data["run"]
    reasons = [r for r in (run.get("waiting_for") or "").split("; ") if r]
    lines = [_waiting_on(data, reason, now) for reason in reasons]
    if not lines:
        lines.append(Reason("wait", "Suspended."))
    wake_at = run.get("wake_at")
    if wake_at is not None and wake_at <= now:
        lines.append(Reason("warn", "Due now: the next worker resumes it."))
    elif wake_at is None:
        lines.append(Reason("info", "No timer: only a message (payload, result, wake) wakes it."))
    return lines


def _waiting_on(data: dict[str, Any], reason: str, now: float) -> Reason:
    if match := _HOOK.match(reason):
        token = match["token"]
        return Reason("wait", f"Waiting on hook `{token}`: press r to send it a payload.")
    if match := _CHILD.match(reason):
        child_id = match["id"]
        status = next((c["status"] for c in data["children"] if c["id"] == child_id), None)
        state = f" (it is {status})" if status else ""
        return Reason("wait", f"Waiting on child run {child_id}{state}: press enter on it below.")
    if match := _RETRY.match(reason):
        rows = [r for r in data["steps"] if r["name"] == match["name"] and r["kind"] == "step"]
        retrying = [r for r in rows if r["status"] == "retrying"] or rows
        if retrying:
            return _retry(data, retrying[-1], now)
    if _SLEEP.match(reason):
        sleeping = [r for r in data["steps"] if r["kind"] == "sleep" and r["status"] == "sleeping"]
        if sleeping:
            return Reason("wait", f"Sleeping until {at(sleeping[0]['until'], now)}.")
    if reason.startswith("resume"):
        return Reason("warn", "The driver stopped (drain or reload): the next worker resumes it.")
    return Reason("wait", f"Waiting for {reason}.")


def _retry(data: dict[str, Any], row: dict[str, Any], now: float) -> Reason:
    """``Retrying step 'x': attempt 2 of 4 at T (in 3s); attempt 1 failed with E``."""
    failed = row["attempts"]
    limit = _max_attempts(data["events"], row["op"])
    of = f" of {limit}" if limit else ""
    when = f" at {at(row['retry_at'], now)}" if row.get("retry_at") is not None else ""
    text = (
        f"Retrying step {row['name']!r}: attempt {failed + 1}{of}{when}; "
        f"attempt {failed} failed with {error_text(row.get('error'))}"
    )
    return Reason("warn", text)


def _max_attempts(events: list[dict[str, Any]], op: int) -> int | None:
    """The step's attempt limit if the journal records it (``max_attempts`` on its retries).

    Older journals do not say; then the header gives the attempt number alone.
    """
    for event in reversed(events):
        if event.get("type") == "step_retrying" and event.get("op") == op:
            limit = event.get("max_attempts")
            if isinstance(limit, int):
                return limit
            retries = event.get("max_retries")
            return retries + 1 if isinstance(retries, int) else None
    return None
