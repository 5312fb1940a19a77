"""The read-model of a run's journal: operations with their attempts, failures, races,
compensations. Pure functions over journal events (no store, no I/O).
"""

from __future__ import annotations

import time
import typing
from typing import Any

from wf import _events
from wf.admin._model import (
    Attempt,
    Compensations,
    ErrorInfo,
    Failure,
    Operation,
    OperationKind,
    Race,
)

# Every table of event names here derives from the journal schema (``wf._events``).
OUTCOME_TYPES = frozenset(_events.OUTCOME_EVENTS)

_ROWS: tuple[OperationKind, ...] = typing.get_args(OperationKind)
"""The operations shown to people (the others are bookkeeping of composition)."""

# Journal events that open an operation shown to people, and the operation's kind.
_ROW_KINDS: dict[str, OperationKind] = {
    event: op for event, op in _events.OPENING_EVENTS.items() if op in _ROWS
}

# Events about a hook that carry the hook's operation id in ``hook`` (their own ``op``, if any,
# is the id of the ``next()``/``dispose()`` call).
_HOOK_EVENTS = _events.HOOK_EVENTS

_ENDED = frozenset(_events.OUTCOME_EVENTS.values())
"""The statuses of a run that has ended (the record's, for ``run_status``)."""


def operations(
    journal: list[dict[str, Any]], *, run_status: str | None = None, now: float | None = None
) -> list[Operation]:
    """One ``Operation`` per step, sleep, hook, child run or patch marker of the run, in
    operation order.

    ``run_status`` (the record's) tells a step still running from one its run stopped driving
    (``interrupted``); ``now`` (default: the wall clock) decides which sleeps are over.
    """
    now = time.time() if now is None else now
    rows: dict[int, Operation] = {}
    children: dict[str, Operation] = {}
    woken_after: float | None = None
    finished = False
    ended_at = now
    for event in journal:
        kind_of = event.get("type", "")
        ts = float(event.get("ts", 0.0))
        if kind_of == "wake_requested":
            woken_after = ts
        elif kind_of in OUTCOME_TYPES:
            finished = True
            ended_at = ts
        elif kind_of in _HOOK_EVENTS:
            hook_op = event.get("hook")
            hook = rows.get(hook_op) if isinstance(hook_op, int) else None
            if hook is not None:
                _apply_hook(hook, kind_of, ts)
        elif kind_of == "select_decided":
            _cancel_losers(rows, event.get("cancelled"), ts)
            # Older journals name in ``cancelled`` only losing candidates that are steps: a
            # step a losing helper coroutine was in is among the ``lost_ops`` all the same.
            _cancel_losers(rows, event.get("lost_ops"), ts)
        elif kind_of == "child_finished":
            child = children.get(str(event.get("child")))
            if child is not None:
                child.status = str(event.get("status") or "done")
                child.error = error_info(event.get("error"))
                child.finish(ts)
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
            row = rows[op] = Operation(op, row_kind, str(name or row_kind), started_at=ts)
            if row_kind == "child":
                children[row.name] = row
        _apply(row, kind_of, event, ts)
    stopped = finished or run_status not in (None, "running", "pending")
    # A run that has ended never comes back to what it left open: a step still running then
    # (a sibling of a failed wf.map) or a sleep that had not elapsed (the loser of a
    # wf.select) was cancelled. "interrupted" is for a run that will resume and run it again.
    left = "cancelled" if finished else "interrupted"
    ended = finished or run_status in _ENDED
    for row in rows.values():
        if row.kind == "sleep" and row.status == "sleeping":
            _end_sleep(row, finished, woken_after, now, ended_at)
        if row.kind == "hook" and row.status == "waiting" and ended:
            # Nothing can resume it now (its token is gone with the run): like a sleep the
            # run ended before, it was cancelled, not still waiting.
            row.status = "cancelled"
            row.finish(ended_at)
        if row.status == "running" and row.kind == "step" and stopped:
            row.status = left
            if finished:
                row.finish(ended_at)
        if row.spans and row.spans[-1].status == "running" and stopped:
            row.spans[-1].status = left
    return [rows[op] for op in sorted(rows)]


def _cancel_losers(rows: dict[int, Operation], ops: Any, ts: float) -> None:
    """The steps a ``wf.select`` cancelled when it decided (its event's ``cancelled``, or
    ``lost_ops``: the ops its losing helper coroutines took): ended then, never to run again
    (a replay does not start a loser). One that had ended already is left as it ended."""
    for op in ops if isinstance(ops, list) else ():
        row = rows.get(op) if isinstance(op, int) else None
        if row is None or row.kind != "step" or row.status not in ("running", "retrying"):
            continue
        row.status = "cancelled"
        row.retry_at = None
        row.finish(ts)
        if row.spans and row.spans[-1].status == "running":
            row.spans[-1].status = "cancelled"
            row.spans[-1].finished_at = ts


def _end_sleep(
    row: Operation, finished: bool, woken_after: float | None, now: float, ended_at: float
) -> None:
    until = row.until
    woken = woken_after is not None and woken_after >= row.started_at
    if finished and not woken and until is not None and until > ended_at:
        row.status = "cancelled"  # the run ended before the sleep did (a select's loser)
        row.finish(ended_at)
        return
    if finished or woken or (until is not None and until <= now):
        row.status = "done"
        end = min(until, now) if until is not None else now
        if woken and woken_after is not None:
            end = min(end, woken_after)
        row.finish(end)


def _apply(row: Operation, kind_of: str, event: dict[str, Any], ts: float) -> None:
    attempt = event.get("attempt")
    if isinstance(attempt, int):
        row.attempts = max(row.attempts, attempt)
    if kind_of == "step_started":
        row.status = "running"
        row.retry_at = None
        if "args" in event:
            row.args = event["args"]
        row.spans.append(Attempt(attempt if isinstance(attempt, int) else 1, ts))
    elif kind_of == "step_completed":
        row.status = "completed"
        row.retry_at = None
        row.finish(ts)
        _end_span(row, attempt, ts, "completed", None)
    elif kind_of == "step_retrying":
        row.status = "retrying"
        row.retry_at = event.get("retry_at")
        row.error = error_info(event.get("error"))
        span = _end_span(row, attempt, ts, "retried", row.error)
        span.retry_at = row.retry_at
    elif kind_of == "step_failed":
        row.status = "failed"
        row.retry_at = None
        row.error = error_info(event.get("error"))
        row.finish(ts)
        _end_span(row, attempt, ts, "failed", row.error)
    elif kind_of == "sleep_started":
        row.status = "sleeping"
        until = event.get("until")
        # Not a time (damage, which the run's detail names): shown without a deadline.
        row.until = until if type(until) is float or type(until) is int else None
    elif kind_of == "hook_created":
        row.status = "waiting"
    elif kind_of == "patch_recorded":
        row.status = "recorded"
        row.finish(ts)


def _end_span(
    row: Operation, attempt: Any, ts: float, status: str, error: ErrorInfo | None
) -> Attempt:
    """Close the attempt an end event belongs to (opened by its ``step_started``, which a
    crash may have lost: then the attempt is taken to have started and ended at once)."""
    number = attempt if isinstance(attempt, int) else len(row.spans) or 1
    span = row.spans[-1] if row.spans and row.spans[-1].number == number else None
    if span is None:
        span = Attempt(number, ts)
        row.spans.append(span)
    span.finished_at = ts
    span.status = status
    span.error = error
    return span


def _apply_hook(row: Operation, kind_of: str, ts: float) -> None:
    if kind_of == "hook_payload":
        row.attempts += 1
        row.status = "received"
    elif kind_of == "hook_disposed":
        row.status = "disposed"
        row.finish(ts)


def error_info(info: Any) -> ErrorInfo | None:
    """``{"type", "message"}`` of a recorded error, or None."""
    if not isinstance(info, dict):
        return None
    return {"type": info.get("type"), "message": info.get("message")}


def failures(journal: list[dict[str, Any]]) -> list[Failure]:
    """Every recorded failure, oldest first: failed step attempts (retried or not) and the run's."""
    out: list[Failure] = []
    for event in journal:
        kind_of = event.get("type")
        if kind_of not in ("step_retrying", "step_failed", "run_failed"):
            continue
        info = event.get("error")
        info = info if isinstance(info, dict) else {}
        out.append(
            Failure(
                ts=event.get("ts"),
                op=event.get("op"),
                name=event.get("name", "run" if kind_of == "run_failed" else None),
                attempt=event.get("attempt"),
                retried=kind_of == "step_retrying",
                type=info.get("type"),
                message=info.get("message"),
                traceback=info.get("traceback"),
            )
        )
    return out


def max_attempts(journal: list[dict[str, Any]], op: int) -> int | None:
    """A step's attempt limit if its journal records it (on its retries); older journals do not."""
    for event in reversed(journal):
        if event.get("type") == "step_retrying" and event.get("op") == op:
            limit = event.get("max_attempts")
            if isinstance(limit, int):
                return limit
            retries = event.get("max_retries")
            return retries + 1 if isinstance(retries, int) else None
    return None


def child_ops(journal: list[dict[str, Any]]) -> dict[str, int]:
    """Child run id -> the parent's operation that started it."""
    return {
        str(e["child"]): int(e["op"])
        for e in journal
        if e.get("type") == "child_started" and isinstance(e.get("op"), int)
    }


def races(journal: list[dict[str, Any]]) -> list[Race]:
    """Each decided ``wf.select`` / ``wf.first``, in the order they were decided."""
    return [
        Race(op=e.get("op"), winner=e.get("index"), decided_at=e.get("ts"))
        for e in journal
        if e.get("type") == "select_decided"
    ]


def compensations(
    journal: list[dict[str, Any]], rows: list[Operation], run_status: str
) -> Compensations:
    """What ``wf.rollback`` registered and which compensation steps ran after the failure.

    ``registered``: ``{"op", "name", "registered_at"}`` in registration order. ``ran``: the
    operations (``op``, ``name``, ``status``, ``attempts``, ``error``) of the compensation
    steps, in the order they ran (last registered first). ``errors``: ``{"type", "message"}`` of
    compensations that failed, as recorded with the run's outcome.

    The journal does not mark where compensating began, but the kernel runs compensations only
    once the workflow body has stopped, each as a new step, last registered first: so they are
    the run's trailing operations whose names follow the registrations in reverse. Those are
    looked for only in a run that failed or was cancelled, or is winding down after a failed
    step or a cancellation request (a live run's last steps are not compensations).
    """
    registered = [
        {"op": e.get("op"), "name": e.get("name"), "registered_at": e.get("ts")}
        for e in journal
        if e.get("type") == "rollback_registered"
    ]
    outcome = journal[-1] if journal and journal[-1].get("type", "").startswith("run_") else {}
    errors = [
        {"type": err.get("type"), "message": err.get("message")}
        for err in outcome.get("rollback_errors") or ()
        if isinstance(err, dict)
    ]
    winding_down = run_status in ("failed", "cancelled") or (
        run_status in ("running", "suspended", "pending")
        and any(e.get("type") in ("step_failed", "cancel_requested") for e in journal)
    )
    ran: list[dict[str, Any]] = []
    if registered and winding_down:
        ran = _compensations_ran(journal, rows, registered)
    return Compensations(registered=registered, ran=ran, errors=errors)


def _compensations_ran(
    journal: list[dict[str, Any]], rows: list[Operation], registered: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    from wf._events import OPENING_EVENTS  # which events allocate an op id

    expected = [str(r["name"]) for r in reversed(registered)]
    ops = sorted({e["op"] for e in journal if e.get("type") in OPENING_EVENTS and "op" in e})
    by_op = {row.op: row for row in rows}
    last_registered = max(int(r["op"] or 0) for r in registered)
    tail: list[Operation] = []
    # Walk back from the newest operation while it is a step after the registrations.
    for op in reversed(ops):
        row = by_op.get(op)
        if row is None or row.kind != "step" or op <= last_registered:
            break
        tail.append(row)
    tail.reverse()
    # The trailing steps are compensations only as far as they follow the expected order
    # from its start: the longest such suffix of the tail.
    for start in range(len(tail)):
        names = [row.name for row in tail[start:]]
        if names == expected[: len(names)]:
            return [
                {
                    "op": row.op,
                    "name": row.name,
                    "status": row.status,
                    "attempts": row.attempts,
                    "error": row.error,
                }
                for row in tail[start:]
            ]
    return []


def refused_payload(journal: list[dict[str, Any]], message: str) -> str | None:
    """Why the run refused the payload the inbox message ``message`` carried, as its journal
    says (``hook_payload_refused``); None if it took it, or has not taken it in yet."""
    counts: dict[Any, int] = {}
    found: tuple[Any, int] | None = None
    for event in journal:
        kind_of = event.get("type")
        if kind_of == "hook_payload":
            hook = event.get("hook")
            index = counts.get(hook, 0)
            counts[hook] = index + 1
            if event.get("message") == message:
                found = (hook, index)
        elif (
            kind_of == "hook_payload_refused"
            and found is not None
            and (event.get("hook"), event.get("index")) == found
        ):
            return str(event.get("error") or "refused")
    return None
