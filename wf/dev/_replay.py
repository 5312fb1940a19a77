"""Right after a reload: replay the runs in flight against the new code, executing nothing.

A run whose journal no longer matches the code would fail with ``NondeterminismError`` the
next time it is resumed — maybe in three days, when its timer fires. Checking at once turns
that into a message while the edit is fresh: which run, which operation, what the journal
recorded and what the code now calls, and where.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from pathlib import Path

from wf.admin._read import list_runs
from wf.dev._events import DevEvent, Diverged, ReplayTrouble
from wf.engine._replay_check import check_runs
from wf.engine._workflow import registered
from wf.store import RunRecord, RunStatus, Store

IN_FLIGHT = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUSPENDED)
LIMIT = 200
"""Newest runs in flight looked at per reload (a dev store rarely holds more)."""


def relative_location(location: str | None) -> str | None:
    """``file:line`` with the file relative to the current directory when inside it."""
    if not location:
        return location
    file, sep, line = location.rpartition(":")
    if not sep or not (line.isascii() and line.isdigit()):
        return location
    with contextlib.suppress(ValueError):
        return f"{Path(file).resolve().relative_to(Path.cwd().resolve())}:{line}"
    return location


def _concerned(run: RunRecord, modules: Collection[str]) -> bool | str:
    """True when the run's workflow lives in a reloaded module; a message when it is gone."""
    declared = registered(run.workflow)
    if declared is not None:
        return declared.fn.__module__ in modules
    module = (run.target or "").rpartition(":")[0]
    if module in modules:
        return f"workflow {run.workflow!r} is no longer declared in {module!r}"
    return False


async def check_in_flight(
    store: Store, modules: Collection[str], *, limit: int = LIMIT
) -> tuple[list[str], list[DevEvent]]:
    """Replay-check the runs in flight whose workflows live in ``modules``.

    Returns the ids of the runs checked and an event for each that diverged or could not be
    checked.
    """
    runs = (await list_runs(store, status=list(IN_FLIGHT), limit=limit)).runs
    events: list[DevEvent] = []
    chosen: list[str] = []
    for run in runs:
        concern = _concerned(run, modules)
        if isinstance(concern, str):
            events.append(ReplayTrouble(run.id, run.workflow, concern))
        elif concern:
            chosen.append(run.id)
    for report in await check_runs(store, chosen):
        divergence = report.divergence
        if report.status == "diverged" and divergence is not None:
            events.append(
                Diverged(
                    report.run_id,
                    report.workflow,
                    divergence.index,
                    divergence.recorded,
                    divergence.current,
                    relative_location(divergence.location),
                )
            )
        elif report.status != "ok":
            events.append(ReplayTrouble(report.run_id, report.workflow, report.message))
    return chosen, events
