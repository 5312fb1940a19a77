"""Everything known about one run, gathered into one JSON-able dict.

``gather_run`` is the single source for ``wf inspect --json``, the plain ``wf inspect`` rendering
and the terminal UI (``wf.cli.tui``); its shape is documented in ``docs/cli.md``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from wf.cli._format import duration, error_text, timestamp
from wf.cli._inspect_links import child_ops, compensations, parent_link, races, replay_fields
from wf.cli._journal import errors, operation_rows

if TYPE_CHECKING:
    from wf.store import RunRecord, Store


async def gather_run(
    store: Store, run_id: str, *, now: float | None = None, replay: bool = False
) -> dict[str, Any]:
    """The run's record, operations, journal, errors, hooks, streams and child runs.

    Keys: ``run`` (the record as JSON: values are tagged JSON), ``why`` (one line: why the run
    is where it is), ``steps`` (``_journal.operation_rows``), ``events`` (the whole journal),
    ``errors`` (``_journal.errors``), ``hooks`` (live hooks), ``streams`` (name ->
    ``{"chunks", "closed"}``) and ``children`` (``{"id", "workflow", "status"}``).
    ``now`` (epoch seconds, default the wall clock) decides which sleeps are over; the terminal
    UI passes its engine's clock so that a test's fake clock gives stable screens.
    Also (``_inspect_links``): ``parent`` (``{"id", "workflow", "status"}`` or None),
    ``races`` (decided selects), ``compensations``, ``deployment`` (``{"recorded",
    "current"}``) and ``replays`` (the replay check of the run against the code here, or None).
    ``replay=True`` fills ``replays`` and ``deployment.current``; it imports the workflow's
    module, so it is never done unasked.
    Raises ``wf.RunNotFound``.
    """
    record = await store.get_run(run_id)
    journal = await store.read_journal(run_id)
    hooks = await store.list_hooks(run_id)
    streams = await store.list_streams(run_id)
    children = await store.list_runs(parent_id=run_id, limit=1000)
    now = time.time() if now is None else now
    rows = operation_rows(journal, run_status=record.status.value, now=now)
    started_by = child_ops(journal)
    replays, current = await replay_fields(store, record) if replay else (None, None)
    return {
        "run": record.to_json(),
        "why": explain(record, rows, now),
        "steps": rows,
        "events": journal,
        "errors": errors(journal),
        "hooks": [dataclasses.asdict(hook) for hook in hooks],
        "streams": {
            name: {"chunks": count, "closed": closed}
            for name, (count, closed) in sorted(streams.items())
        },
        "children": [
            {
                "id": child.id,
                "workflow": child.workflow,
                "status": child.status.value,
                "op": started_by.get(child.id),
            }
            for child in children
        ],
        "parent": await parent_link(store, record),
        "races": races(journal),
        "compensations": compensations(journal, rows, record.status.value),
        "deployment": {"recorded": record.deployment, "current": current},
        "replays": replays,
    }


def explain(record: RunRecord, rows: list[dict[str, Any]], now: float) -> str:
    """One line saying why the run is where it is."""
    status = record.status.value
    if status == "pending":
        return "queued: the next `wf worker` (or `wf run` of it) will start it"
    if status == "running":
        active = [r["name"] for r in rows if r["kind"] == "step" and r["status"] == "running"]
        retrying = [r for r in rows if r["status"] == "retrying"]
        if active:
            names = ", ".join(repr(n) for n in active)
            return f"running step {names} (if its process died, the next worker resumes it)"
        if retrying:
            row = retrying[0]
            return f"step {row['name']!r} waits to retry (attempt {row['attempts'] + 1})"
        return "running (if its process died, the next worker resumes it)"
    if status == "suspended":
        what = record.waiting_for or "waiting"
        if record.wake_at is None:
            return f"suspended: {what}; wakes when a message arrives"
        if record.wake_at <= now:
            return f"suspended: {what}; due now, the next worker resumes it"
        return (
            f"suspended: {what}; wakes at {timestamp(record.wake_at)} "
            f"(in {duration(record.wake_at - now)})"
        )
    took = duration(record.updated_at - record.created_at)
    if status == "completed":
        return f"completed in {took}"
    if status == "cancelled":
        return f"cancelled after {took}"
    failed = [r for r in rows if r["status"] == "failed"]
    where = ""
    if failed:
        where = f" in step {failed[-1]['name']!r} after {failed[-1]['attempts']} attempt(s)"
    return f"failed{where}: {error_text(record.error)}"
