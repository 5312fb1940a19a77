"""Why a run is where it is — the answer to "why isn't my run moving?" — as data.

One explainer for every front end: ``explain`` turns a ``RunDetail`` (plus, for a running run,
whether its driver process is gone) into ``Reason``s; the CLI, the terminal UI and the web UI
put them into words.
"""

from __future__ import annotations

from wf._events import Waiting, read_waiting
from wf.admin import _journal
from wf.admin._model import Explanation, Operation, Reason, RunDetail
from wf.engine._deployments import waiting_for_worker

_DONE = frozenset({"completed", "done", "received"})


def explain(detail: RunDetail, *, driver_gone: bool | None = None) -> Explanation:
    """The facts that say why the run is where it is, most important first.

    ``driver_gone``: True when a running run's lock is free (its process died); None takes
    the detail's own answer (``RunDetail.driver_gone``, probed by ``run_detail``).
    """
    record = detail.run
    status = record.status.value
    gone = detail.driver_gone if driver_gone is None else driver_gone
    reasons = _by_status(detail, status, gone)
    if detail.cancel_requested and not record.status.is_terminal:
        reasons.append(Reason("cancel_requested", "warn"))
    pending = [kind for kind in detail.inbox if kind != "cancel"]
    if pending and status in ("suspended", "pending"):
        kinds = tuple(sorted(set(pending)))
        reasons.append(Reason("undelivered", "warn", count=len(pending), kinds=kinds))
    unserved = detail.queue.get("unserved")
    if unserved is not None and not record.status.is_terminal:
        held = detail.queue.get("held") or {}
        if held.get("reason") != waiting_for_worker(unserved):  # a pending run's hold says it
            reasons.append(Reason("unserved", "warn", name=unserved))
    return Explanation(status, tuple(reasons), record.waiting_for, record.wake_at)


def _by_status(detail: RunDetail, status: str, driver_gone: bool | None) -> list[Reason]:
    record = detail.run
    took = record.updated_at - record.created_at
    if status == "pending":
        held = detail.queue.get("held")
        if held:
            return [
                Reason("held", "wait", detail=held["reason"], count=held["ahead"], at=held["at"])
            ]
        return [Reason("queued", "info")]
    if status == "completed":
        return [Reason("completed", "ok", took=took)]
    if status == "cancelled":
        return [Reason("cancelled", "warn", took=took)]
    if status == "failed":
        failed = [row for row in detail.steps if row.status == "failed"]
        if not failed:
            return [Reason("failed", "error", error=record.error)]
        row = failed[-1]
        return [
            Reason(
                "failed", "error", op=row.op, name=row.name, attempt=row.attempts,
                error=record.error,
            )
        ]  # fmt: skip
    if status == "running":
        return _running(detail, driver_gone)
    return _suspended(detail)


def _running(detail: RunDetail, driver_gone: bool | None) -> list[Reason]:
    reasons: list[Reason] = []
    if driver_gone:
        done = sum(1 for row in detail.steps if row.status in _DONE)
        reasons.append(Reason("driver_gone", "error", count=done))
    for row in detail.steps:
        if row.kind == "step" and row.status == "running":
            reasons.append(
                Reason(
                    "step_running", "info", op=row.op, name=row.name, attempt=row.attempts,
                    since=row.started_at, stale=bool(driver_gone),
                )
            )  # fmt: skip
        elif row.status == "retrying":
            reasons.append(_retry(detail, row))
        elif row.kind == "sleep" and row.status == "sleeping":
            reasons.append(Reason("sleeping", "wait", op=row.op, at=row.until))
    if not reasons:
        reasons.append(Reason("between", "info"))
    return reasons


def _suspended(detail: RunDetail) -> list[Reason]:
    record = detail.run
    # What it waits on is structured (``wf._events.Waiting``): read, never parsed from words.
    reasons = [_waiting_on(detail, wait) for wait in read_waiting(record.waiting_for) or ()]
    if not reasons:
        reasons.append(Reason("suspended", "wait"))
    if record.wake_at is None:
        reasons.append(Reason("no_timer", "info"))
    elif record.wake_at <= detail.now:
        reasons.append(Reason("due", "warn", at=record.wake_at))
    else:
        reasons.append(Reason("wakes", "wait", at=record.wake_at))
    return reasons


def _waiting_on(detail: RunDetail, wait: Waiting) -> Reason:
    kind, target = wait["kind"], wait["target"]
    if kind == "hook":
        return Reason("hook", "wait", name=target)
    if kind == "child":
        status = next((c.status for c in detail.children if c.id == target), None)
        return Reason("child", "wait", name=target, status=status)
    if kind == "retry":
        rows = [r for r in detail.steps if r.name == target and r.kind == "step"]
        retrying = [r for r in rows if r.status == "retrying"] or rows
        if retrying:
            return _retry(detail, retrying[-1])
    if kind == "sleep":
        sleeping = [r for r in detail.steps if r.kind == "sleep" and r.status == "sleeping"]
        if sleeping:
            return Reason("sleeping", "wait", op=sleeping[0].op, at=sleeping[0].until)
        return Reason("sleeping", "wait", at=wait["until"])
    if kind == "resume":
        return Reason("resume", "warn")
    if kind == "text":
        return Reason("waiting", "wait", detail=target)  # an older wf's sentence, as it was
    return Reason("waiting", "wait", detail=f"{kind} {target or ''}".strip(), at=wait["until"])


def _retry(detail: RunDetail, row: Operation) -> Reason:
    """A step waiting to retry: the attempt that failed, the limit if recorded, when, why."""
    return Reason(
        "retrying", "warn", op=row.op, name=row.name, attempt=row.attempts,
        max_attempts=_journal.max_attempts(detail.events, row.op), at=row.retry_at,
        error=row.error,
    )  # fmt: skip
