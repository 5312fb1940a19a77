"""The replay check (``wf check --replay``): which runs to replay, and its report as JSON with
the source line of a divergence."""

from __future__ import annotations

import linecache
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.engine._replay_check import ReplayReport
    from wf.store import Store


def source_of(location: str | None) -> tuple[str | None, str | None]:
    """``(path:line as shown, the code on that line)`` for a ``file:line`` location.

    The path is made relative to the current directory when it lies below it, which is how a
    user (and an editor's "go to file" in a CI log) knows it.
    """
    if not location:
        return None, None
    path, sep, line = location.rpartition(":")
    if not sep or not (line.isascii() and line.isdigit()):
        return location, None
    try:
        shown = os.path.relpath(path)
        if shown.startswith(".."):
            shown = path
    except ValueError:  # another drive on Windows
        shown = path
    code = linecache.getline(path, int(line)).strip() or None
    return f"{shown}:{line}", code


def report_json(report: ReplayReport) -> dict[str, Any]:
    """The kernel's report as JSON, plus the source text of a divergence's line."""
    data = report.to_json()
    divergence = data.get("divergence")
    if divergence is not None:
        divergence["source"] = source_of(divergence.get("location"))[1]
    return data


async def replay_runs(
    store: Store,
    run_ids: Sequence[str] | None,
    *,
    unfinished: bool = False,
    deployment: str | None = None,
) -> tuple[list[ReplayReport], dict[str, int]]:
    """Replay-check ``run_ids`` (validated first: an unknown id is ``RunNotFound``), or every
    run of the store; with ``unfinished`` only runs that can still resume (the ones a deploy
    of this code would replay); with ``deployment`` only the runs a worker of that deployment
    drives (pinned to it, or unpinned): the others stay on their own deployment's code.

    Returns the reports, and how many runs of the selection each other deployment holds that
    ``deployment`` left unchecked (empty without it)."""
    from wf._exceptions import StoreCorrupted
    from wf.engine._replay_check import check_runs
    from wf.store import RunStatus
    from wf.store._base import Pages
    from wf.store._faults import collect_faults
    from wf.store._ids import validate_run_id

    damaged: list[str] = []
    if run_ids:
        ids = list(dict.fromkeys(validate_run_id(r) for r in run_ids))
        records = []
        for run_id in ids:
            try:
                records.append(await store.get_run(run_id))
            except StoreCorrupted:
                # Checked all the same (whatever the filters): its report says the damage,
                # and the other runs are still replayed.
                damaged.append(run_id)
    else:
        records = []
        pages = Pages()
        with collect_faults() as skipped_runs:
            while pages.take(page := await store.list_runs(limit=1000, before=pages.before)):
                records.extend(page)
        for fault in skipped_runs:
            if fault.kind == "run" and _is_run_id(fault.item):
                # The listing cannot read it: checked all the same, so its report says the
                # damage (an error: CI fails) rather than leaving it out of "N ok".
                damaged.append(fault.item)
            else:
                store.faults.note_collected(fault)  # said as the listing would have said it
    if unfinished:
        live = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUSPENDED)
        records = [r for r in records if r.status in live]
    skipped: dict[str, int] = {}
    if deployment is not None:
        for record in records:
            if record.deployment not in (deployment, None):
                skipped[record.deployment] = skipped.get(record.deployment, 0) + 1
        records = [r for r in records if r.deployment in (deployment, None)]
    checked = await check_runs(store, damaged + [r.id for r in records])
    order = {run_id: i for i, run_id in enumerate(ids)} if run_ids else {}
    checked.sort(key=lambda report: order.get(report.run_id, 0))
    return checked, dict(sorted(skipped.items()))


def _is_run_id(item: str) -> bool:
    from wf._exceptions import UsageError
    from wf.store._ids import validate_run_id

    try:
        validate_run_id(item)
    except UsageError:
        return False  # a file name: too damaged to say whose
    return True
