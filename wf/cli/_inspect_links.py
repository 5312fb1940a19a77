"""The parts of ``wf inspect --json`` that relate a run to other things: its parent and
children, the races it decided, its compensations, the code it started on, and whether its
journal still replays against the code as it is now.

Pure functions over the journal where possible (no store), so the terminal UI can reuse them;
``replay_fields`` is the exception: it imports the run's workflow module, so it only runs when
asked (``wf inspect --replay``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.store import RunRecord, Store


def child_ops(journal: list[dict[str, Any]]) -> dict[str, int]:
    """Child run id -> the parent's operation that started it."""
    return {
        str(e["child"]): int(e["op"])
        for e in journal
        if e.get("type") == "child_started" and isinstance(e.get("op"), int)
    }


def races(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each decided ``wf.select`` / ``wf.first``: ``{"op", "winner", "decided_at"}``.

    ``winner`` is the index (in the call's argument order) of the operation that finished
    first; a replay takes the same branch whatever finishes first then.
    """
    return [
        {"op": e.get("op"), "winner": e.get("index"), "decided_at": e.get("ts")}
        for e in journal
        if e.get("type") == "select_decided"
    ]


def compensations(
    journal: list[dict[str, Any]], rows: list[dict[str, Any]], run_status: str
) -> dict[str, Any]:
    """What ``wf.rollback`` registered and which compensation steps ran after the failure.

    ``registered``: ``{"op", "name", "registered_at"}`` in registration order. ``ran``: the
    operation rows (``op``, ``name``, ``status``, ``attempts``, ``error``) of the compensation
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
    ran: list[dict[str, Any]] = []
    winding_down = run_status in ("failed", "cancelled") or (
        run_status in ("running", "suspended", "pending")
        and any(e.get("type") in ("step_failed", "cancel_requested") for e in journal)
    )
    if registered and winding_down:
        expected = [str(r["name"]) for r in reversed(registered)]
        from wf.engine._context import OPENING_EVENTS  # which events allocate an op id

        ops = sorted({e["op"] for e in journal if e.get("type") in OPENING_EVENTS and "op" in e})
        by_op = {row["op"]: row for row in rows}
        last_registered = max(int(r["op"] or 0) for r in registered)
        tail: list[dict[str, Any]] = []
        # Walk back from the newest operation while it is a step after the registrations.
        for op in reversed(ops):
            row = by_op.get(op)
            if row is None or row["kind"] != "step" or op <= last_registered:
                break
            tail.append(row)
        tail.reverse()
        # The trailing steps are compensations only as far as they follow the expected order
        # from its start: the longest such suffix of the tail.
        for start in range(len(tail)):
            names = [str(row["name"]) for row in tail[start:]]
            if names == expected[: len(names)]:
                ran = [
                    {key: row[key] for key in ("op", "name", "status", "attempts", "error")}
                    for row in tail[start:]
                ]
                break
    return {"registered": registered, "ran": ran, "errors": errors}


async def parent_link(store: Store, record: RunRecord) -> dict[str, Any] | None:
    """``{"id", "workflow", "status"}`` of the run's parent (None for a top-level run).

    A parent that cannot be read (removed from the store) keeps its id, with null details.
    """
    from wf._exceptions import RunNotFound

    if record.parent_id is None:
        return None
    try:
        parent = await store.get_run(record.parent_id)
    except RunNotFound:
        return {"id": record.parent_id, "workflow": None, "status": None}
    return {"id": parent.id, "workflow": parent.workflow, "status": parent.status.value}


async def replay_fields(store: Store, record: RunRecord) -> tuple[dict[str, Any], str | None]:
    """The replay check of this run against the code here (``wf.engine._replay_check``), and
    the deployment hash of that code (None if the workflow cannot be loaded).

    Imports the workflow's module through the run's recorded target, like a worker would.
    """
    from wf.cli._replay import report_json
    from wf.engine._deployment import deployment_of
    from wf.engine._replay_check import check_run
    from wf.engine._workflow import resolve_workflow

    report = await check_run(store, record.id)
    try:
        current = deployment_of(resolve_workflow(record.workflow, record.target).fn)
    except Exception:  # the report already says why the code cannot be loaded
        current = None
    return report_json(report), current
