"""Format 5: run counts (``counts/``) and the status and workflow indexes (``by-status/``,
``by-workflow/``) of an older store, built in place.

Format 5 keeps both as runs change; a format-4 wf would not (its runs would be missing from
``by-status/`` and its changes from the counts), so the format number moves and it refuses
the store. The step reads every run's record once (for the counts) and every index name once
(for the indexes); it is idempotent (a crash part-way repeats it: counts are set to what the
scan finds, index entries made if absent) and runs once, under ``migrate.lock``.
"""

from __future__ import annotations

import os

from wf._exceptions import RunNotFound, StoreCorrupted
from wf.store._base import RunStatus
from wf.store.local import _records
from wf.store.local._counts import Counters
from wf.store.local._index import Index
from wf.store.local._layout import run_exists


def count_runs(root: str) -> dict[str, int]:
    """Runs by status (every status present), by reading every run's record."""
    counts = {status.value: 0 for status in RunStatus}
    runs = os.path.join(root, "runs")
    try:
        names = os.listdir(runs)
    except FileNotFoundError:
        return counts
    for run_id in names:
        run_dir = os.path.join(runs, run_id)
        if run_id.startswith(".") or not run_exists(run_dir):
            continue
        try:
            status = str(_records.read_raw(run_dir, run_id).get("status"))
        except (RunNotFound, StoreCorrupted, FileNotFoundError):
            continue  # verify names the damage; such a run has no count to give
        if status in counts:
            counts[status] += 1
    return counts


def index_and_count(root: str) -> None:
    """Build ``by-status/`` and ``by-workflow/``, and set ``counts/`` from a scan."""
    from wf.store.local._upkeep import Tombstones

    Index(root).build_secondary()
    counters = Counters(root)
    try:
        counters.set_to({**count_runs(root), "tombstones": Tombstones(root).count()})
        counters.mark_ready()
    finally:
        counters.close()
