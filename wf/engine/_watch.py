"""Progress of a run: ``wf.progress(data)`` records it, ``run.watch()`` follows it.

A progress report is journaled like any operation. Reported by the workflow body it takes an
operation id, so replay recognises it and never records it twice; reported by a step it is
recorded each time the step runs (a step re-runs only when it did not complete).

``run.watch()`` turns the journal into ``wf.RunEvent``s: ``started`` (each attempt, with its
number), ``progress``, ``retrying`` (an attempt failed and another follows), then one of
``completed``, ``failed``, ``cancelled``. A run that has ended yields only its terminal event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from wf import _events
from wf.engine._codec import decode, encode
from wf.engine._context import require_run
from wf.engine._signature import validate_value
from wf.engine._step import current_step
from wf.engine._workflow import registered
from wf.store import Event, RunRecord, RunStatus

if TYPE_CHECKING:
    from wf.store import Store

TERMINAL_KINDS = ("completed", "failed", "cancelled")


@dataclasses.dataclass(frozen=True)
class RunEvent:
    """One thing that happened to a run, as ``run.watch()`` reports it.

    ``kind``: ``started`` (``attempt``), ``progress`` (``data``), ``retrying`` (``attempt``
    is the next one, ``error`` the failure), ``completed`` (``output``), ``failed``
    (``error``), ``cancelled``. ``ts``: when, in epoch seconds.
    """

    kind: str
    run_id: str
    ts: float
    attempt: int | None = None
    data: Any = None
    output: Any = None
    error: dict[str, Any] | None = None

    @property
    def is_terminal(self) -> bool:
        """True for the run's last event (completed, failed or cancelled)."""
        return self.kind in TERMINAL_KINDS

    def to_json(self) -> dict[str, Any]:
        """The event as JSON (``wf watch --json``): values encoded as tagged JSON."""
        out: dict[str, Any] = {"kind": self.kind, "run_id": self.run_id, "ts": self.ts}
        if self.attempt is not None:
            out["attempt"] = self.attempt
        if self.kind == "progress":
            out["data"] = encode(self.data, where="progress data")
        if self.kind == "completed":
            out["output"] = encode(self.output, where="run output")
        if self.error is not None:
            out["error"] = self.error
        return out


def progress(data: Any) -> None:
    """Report progress of the current run (in a workflow or in a step).

    Validated against ``@wf.workflow(progress=Type)`` if given; recorded in the run's journal,
    durable with its next step; ``run.watch()`` and ``wf watch`` show it. Replay never
    records it again.
    """
    step = current_step()
    ctx = step.run if step is not None else require_run("wf.progress()")
    declared = registered(ctx.record.workflow)
    if declared is not None and declared.options.progress is not None:
        data = validate_value(declared.options.progress, data, where="wf.progress() data")
    encoded = encode(data, where="wf.progress() data")
    if step is not None:
        ctx.write_soon(ctx.event("progress", data=encoded, step=step.op))
        return
    op, found = ctx.begin_op("progress", "progress")
    if found is None:
        ctx.write_soon(ctx.event("progress", op=op, name="progress", data=encoded))


def events_of(run_id: str, journal: list[Event]) -> list[RunEvent]:
    """The ``RunEvent``s a journal holds, in order."""
    out: list[RunEvent] = []
    for event in journal:
        kind = event.get("type")
        ts = float(event.get("ts", 0.0))
        if kind == "run_started":
            if (event.get("record") or {}).get("status") == RunStatus.RUNNING.value:
                out.append(RunEvent("started", run_id, ts, attempt=1))
        elif kind == "run_attempt":
            out.append(RunEvent("started", run_id, ts, attempt=int(event.get("attempt", 1))))
        elif kind == "progress":
            out.append(RunEvent("progress", run_id, ts, data=decode(event.get("data"))))
        elif kind == "run_retrying":
            attempt = int(event.get("attempt", 2))
            out.append(RunEvent("retrying", run_id, ts, attempt=attempt, error=event.get("error")))
        elif kind in _TERMINAL:
            out.append(terminal_event(run_id, kind, event))
    return out


_TERMINAL = _events.OUTCOME_EVENTS  # outcome event kind -> the run status it records


def terminal_event(run_id: str, kind: str, event: Event) -> RunEvent:
    """The ``RunEvent`` of an outcome event."""
    output = decode(event.get("output")) if kind == "run_completed" else None
    return RunEvent(
        _TERMINAL[kind],
        run_id,
        float(event.get("ts", 0.0)),
        output=output,
        error=event.get("error"),
    )


def _from_record(record: RunRecord) -> RunEvent:
    kind = {"completed": "run_completed", "failed": "run_failed", "cancelled": "run_cancelled"}
    event = {"output": record.output, "error": record.error, "ts": record.updated_at}
    return terminal_event(record.id, kind[record.status.value], event)


async def watch(store: Store, run_id: str, *, poll: float = 2.0) -> AsyncIterator[RunEvent]:
    """Follow a run's events until its terminal one (see the module docstring)."""
    record = await store.get_run(run_id)
    if record.status.is_terminal:
        yield _from_record(record)
        return
    seen = 0
    while True:
        new = await store.read_journal(run_id, seen)  # what it gained since: linear in all
        for found in events_of(run_id, new):
            yield found
            if found.is_terminal:
                return
        seen += len(new)
        await store.wait_for_run(run_id, poll)
